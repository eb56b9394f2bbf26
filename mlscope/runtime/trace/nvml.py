"""NVIDIA GPU readings for the HARDWARE sampler, through NVML (nvidia-ml-py, module `pynvml`, imported
only when GPUs are asked for), and the names of NVML's clock event (throttle) reasons.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

__all__ = ["GpuReader", "clock_event_reason_names", "decode_clock_event_reasons"]

log = logging.getLogger("mlscope.trace.hardware")

MEBIBYTE = 2**20

# nvidia-ml-py names the clock-limiting reasons "ClocksEventReason*" (driver 535 and later) and,
# deprecated but with two more bits (BoardLimit, Reliability), "ClocksThrottleReason*".
_REASON_PREFIXES = ("nvmlClocksEventReason", "nvmlClocksThrottleReason")
_REASON_FUNCTIONS = ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")


class GpuReader:
    """NVML readings for a few GPU indices; NVML is started by `open` and stopped by `close`."""

    def __init__(self, nvml: ModuleType | None, handles: list[tuple[int, Any]], error: str | None) -> None:
        self.nvml = nvml
        self.handles = handles
        self.error = error
        self.reason_names = clock_event_reason_names(nvml) if nvml is not None else {}

    @classmethod
    def open(cls, indices: Sequence[int]) -> GpuReader:
        try:
            import pynvml
        except ImportError:
            return cls(None, [], "nvidia-ml-py is not installed (pip install nvidia-ml-py)")
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            log.warning("GPUs not sampled: NVML did not start: %s", exc)
            return cls(None, [], f"NVML did not start: {exc}")
        handles, failed = [], []
        for index in indices:
            try:
                handles.append((index, pynvml.nvmlDeviceGetHandleByIndex(index)))
            except pynvml.NVMLError as exc:
                failed.append(f"GPU {index}: {exc}")
        if failed:
            log.warning("GPUs not sampled: %s", "; ".join(failed))
        return cls(pynvml, handles, "; ".join(failed) or None)

    def close(self) -> None:
        if self.nvml is None:
            return
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError as exc:
            log.warning("NVML shutdown failed: %s", exc)
        self.nvml = None

    def read(self) -> list[tuple[int, dict[str, Any]]]:
        return [(index, self._read_one(index, handle)) for index, handle in self.handles]

    def _read_one(self, index: int, handle: Any) -> dict[str, Any]:
        nvml = self.nvml
        assert nvml is not None
        failed: list[str] = []

        def call(fields: Sequence[str], read: Callable[[], Any]) -> Any:
            try:
                return read()
            except nvml.NVMLError:
                failed.extend(fields)
                return None

        utilization = call(
            ["utilization_gpu", "utilization_memory"], lambda: nvml.nvmlDeviceGetUtilizationRates(handle)
        )
        memory = call(["memory_used_mb", "memory_total_mb"], lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
        power_mw = call(["power_w"], lambda: nvml.nvmlDeviceGetPowerUsage(handle))
        processes = call(["processes"], lambda: nvml.nvmlDeviceGetComputeRunningProcesses(handle))
        reasons = call(["throttle_reasons"], lambda: self._clock_event_reasons(handle))
        reading: dict[str, Any] = {
            "kind": "gpu",
            "gpu_index": index,
            "utilization_gpu": None if utilization is None else int(utilization.gpu),
            "utilization_memory": None if utilization is None else int(utilization.memory),
            "memory_used_mb": None if memory is None else round(memory.used / MEBIBYTE, 1),
            "memory_total_mb": None if memory is None else round(memory.total / MEBIBYTE, 1),
            "power_w": None if power_mw is None else round(power_mw / 1000, 3),
            "sm_clock_mhz": call(
                ["sm_clock_mhz"], lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)
            ),
            "memory_clock_mhz": call(
                ["memory_clock_mhz"], lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM)
            ),
            "temperature_c": call(
                ["temperature_c"], lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)
            ),
            "throttle_reasons": None
            if reasons is None
            else decode_clock_event_reasons(reasons, self.reason_names),
            "processes": None if processes is None else len(processes),
        }
        if failed:
            reading["nvml_errors"] = failed
        return reading

    def _clock_event_reasons(self, handle: Any) -> int:
        nvml = self.nvml
        assert nvml is not None
        error = None
        # Drivers before 535 lack the "Event" entry point even where nvidia-ml-py has it.
        for name in _REASON_FUNCTIONS:
            function = getattr(nvml, name, None)
            if function is None:
                continue
            try:
                return int(function(handle))
            except nvml.NVMLError as exc:
                error = exc
        raise (
            error if error is not None else nvml.NVMLError(getattr(nvml, "NVML_ERROR_FUNCTION_NOT_FOUND", 13))
        )


def decode_clock_event_reasons(mask: int, names: dict[int, str]) -> list[str]:
    """The names of the bits set in an NVML clock event (throttle) reasons mask, lowest bit first.

    Args:
        mask: the bitmask from nvmlDeviceGetCurrentClocksEventReasons (or ...ThrottleReasons).
        names: bit value -> name, as read from nvidia-ml-py's constants.

    Returns:
        Names such as "SwPowerCap"; a bit nvidia-ml-py does not name appears as its hex value.
    """
    reasons = []
    bit = 1
    while bit <= mask:
        if mask & bit:
            reasons.append(names.get(bit, f"0x{bit:x}"))
        bit <<= 1
    return reasons


def clock_event_reason_names(nvml: ModuleType) -> dict[int, str]:
    """Bit value -> reason name, from an nvidia-ml-py module's clock event (and throttle) constants.

    Args:
        nvml: the `pynvml` module.

    Returns:
        E.g. {1: "GpuIdle", 4: "SwPowerCap", 512: "BoardLimit", ...}.
    """
    names: dict[int, str] = {}
    for prefix in _REASON_PREFIXES:
        # Sorted, so of two names for one bit the current one wins over its deprecated alias
        # (ApplicationsClocksSetting before UserDefinedClocks).
        for attribute in sorted(name for name in dir(nvml) if name.startswith(prefix)):
            value = getattr(nvml, attribute)
            # Single bits only: leaves out the None (0) and All (every bit) masks.
            if isinstance(value, int) and value > 0 and value & (value - 1) == 0:
                names.setdefault(value, attribute[len(prefix) :])
    return names
