"""The HARDWARE trace level: a sampler thread that records what the CPUs and NVIDIA GPUs were doing
while a profiling pass ran, as spans, and the summary of those samples attached to the pass span.

CPU figures come from psutil; GPU figures from NVML through nvidia-ml-py (module `pynvml`), which is
imported only when GPUs are asked for. Each sample is a span covering the interval since the
previous sample, on the tracer's clock, so samples line up with the pass's inference spans.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from types import ModuleType, TracebackType
from typing import Any

import psutil

from mlscope.runtime.trace.spans import Tracer

__all__ = [
    "MIN_SAMPLE_S",
    "HardwareSampler",
    "clock_event_reason_names",
    "decode_clock_event_reasons",
    "summarize_samples",
]

log = logging.getLogger("mlscope.trace.hardware")

HARDWARE = "HARDWARE"
MEBIBYTE = 2**20

# Linux counts CPU time in 10 ms ticks: a closing sample shorter than two ticks would report noise.
MIN_SAMPLE_S = 0.02

# nvidia-ml-py names the clock-limiting reasons "ClocksEventReason*" (driver 535 and later) and,
# deprecated but with two more bits (BoardLimit, Reliability), "ClocksThrottleReason*".
_REASON_PREFIXES = ("nvmlClocksEventReason", "nvmlClocksThrottleReason")
_REASON_FUNCTIONS = ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")


class HardwareSampler:
    """Samples CPU (and, given indices, NVIDIA GPU) state on a daemon thread between start and stop.

    Every `interval_s` it records one HARDWARE span "cpu" and one span "gpu:<i>" per GPU index, each
    covering [previous sample, this sample] by `tracer.clock`, all children of `parent_id`. The spans
    stay on the sampler until `stop()` hands them to the tracer, so the tracer's list is only ever
    changed on the caller's thread. A tracer that does not record HARDWARE makes the sampler a no-op:
    no thread, no NVML.

    CPU span attributes: "kind": "cpu", "cpu_percent" (busy share of all logical CPUs, 0-100),
    "per_cpu_percent", "cpu_mhz" (None where psutil cannot read it), "process_cpu_percent" (CPU
    time of this process and its descendants alive at start over wall time, 100 = one CPU),
    "process_rss_mb" (same processes), "load_1m".

    GPU span attributes: "kind": "gpu", "gpu_index", "utilization_gpu", "utilization_memory"
    (NVML's own averages over its last sampling period), "memory_used_mb", "memory_total_mb",
    "power_w", "sm_clock_mhz", "memory_clock_mhz", "temperature_c", "throttle_reasons" (names),
    "processes" (compute processes on the GPU); a field whose NVML call failed is None and named
    in "nvml_errors". Both kinds also carry the given `attributes`.

    Attributes:
        spans: the spans recorded, filled in by `stop()`.
        gpu_error: why GPUs were not sampled (nvidia-ml-py missing, NVML failed to start), else None.
    """

    def __init__(
        self,
        tracer: Tracer,
        *,
        parent_id: str,
        interval_s: float = 0.1,
        gpu_indices: Sequence[int] = (),
        attributes: dict[str, Any] | None = None,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        self.tracer = tracer
        self.parent_id = parent_id
        self.interval_s = interval_s
        self.gpu_indices = tuple(gpu_indices)
        self.attributes = dict(attributes or {})
        self.spans: list[dict[str, Any]] = []
        self.gpu_error: str | None = None
        self._pending: list[tuple[str, int, int, dict[str, Any]]] = []
        self._samples = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._cpu: _CpuReader | None = None
        self._gpus: _GpuReader | None = None

    @property
    def active(self) -> bool:
        """Whether this sampler records anything (its tracer records HARDWARE spans)."""
        return self.tracer.enabled(HARDWARE)

    def start(self) -> HardwareSampler:
        """Take the first reading and start the sampling thread (nothing when not `active`).

        Returns:
            The sampler itself.

        Raises:
            RuntimeError: when it was started before.
        """
        if self._thread is not None or self._stopped:
            raise RuntimeError("a HardwareSampler starts once")
        if not self.active:
            return self
        if self.gpu_indices:
            self._gpus = _GpuReader.open(self.gpu_indices)
            self.gpu_error = self._gpus.error
        try:
            self._cpu = _CpuReader()
            self._thread = threading.Thread(
                target=self._run,
                args=(self.tracer.clock.now(),),
                name="mlscope-hardware-sampler",
                daemon=True,
            )
            self._thread.start()
        except BaseException:
            if self._gpus is not None:
                self._gpus.close()
            raise
        return self

    def stop(self) -> int:
        """Take a closing sample (unless the last one is under MIN_SAMPLE_S old), stop the thread,
        shut NVML down and record the spans in the tracer.

        Returns:
            The number of sampling instants (each gave one "cpu" span and one span per GPU).
        """
        if self._stopped:
            return self._samples
        self._stopped = True
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
        if self._gpus is not None:
            self._gpus.close()
        self.spans = []
        for name, start_ns, end_ns, attributes in self._pending:
            if self.tracer.add(
                name, HARDWARE, start_ns, end_ns, parent_id=self.parent_id, attributes=attributes
            ):
                self.spans.append(self.tracer.spans[-1])
        self._pending.clear()
        return self._samples

    def __enter__(self) -> HardwareSampler:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _run(self, previous_ns: int) -> None:
        assert self._cpu is not None
        clock = self.tracer.clock
        interval_ns = int(self.interval_s * 1e9)
        deadline_ns = previous_ns + interval_ns
        while True:
            # Wait for the next tick of a fixed grid, so time spent sampling does not stretch intervals.
            stopping = self._stop.wait(max(0.0, (deadline_ns - clock.now()) / 1e9))
            now_ns = clock.now()
            if stopping and now_ns - previous_ns < MIN_SAMPLE_S * 1e9:
                return
            try:
                self._sample(previous_ns, now_ns)
            except Exception:  # a sampler must never take the profiling pass down with it
                log.exception("hardware sampling stopped after %d samples", self._samples)
                return
            if stopping:
                return
            previous_ns = now_ns
            deadline_ns = max(deadline_ns + interval_ns, now_ns + interval_ns // 2)

    def _sample(self, start_ns: int, end_ns: int) -> None:
        assert self._cpu is not None
        seconds = (end_ns - start_ns) / 1e9
        samples = [("cpu", {"kind": "cpu", **self._cpu.read(seconds)})]
        if self._gpus is not None:
            samples += [(f"gpu:{index}", reading) for index, reading in self._gpus.read()]
        for name, reading in samples:
            self._pending.append((name, start_ns, end_ns, {**self.attributes, **reading}))
        self._samples += 1


class _CpuReader:
    """CPU figures over the interval since its previous reading.

    The process tree is this process and the descendants alive when the reader was made: listing
    descendants means reading every /proc/<pid>/stat, and while another thread holds the GIL each
    of those reads waits out a GIL switch interval (a listing took ~300 ms beside a pure-Python
    busy thread, against <1 ms alone). A child started later counts once it exits and is reaped
    (its time moves into its parent's children_user/children_system).
    """

    def __init__(self) -> None:
        self._process = psutil.Process()
        self._tree = _process_tree(self._process)
        self._cpu_times = psutil.cpu_times(percpu=True)
        self._process_cpu_s = _process_tree_cpu_s(self._tree)

    def read(self, seconds: float) -> dict[str, Any]:
        cpu_times = psutil.cpu_times(percpu=True)
        per_cpu = [
            _busy_percent(_busy_times(before), _busy_times(after))
            # CPUs may go offline: stop at the shorter list (zip without strict=, which Python 3.9,
            # the Caffe2 environment's, lacks).
            for before, after in zip(self._cpu_times, cpu_times)  # noqa: B905
        ]
        overall = _busy_percent(_sum_times(self._cpu_times), _sum_times(cpu_times))
        self._cpu_times = cpu_times
        process_cpu_s = _process_tree_cpu_s(self._tree)
        # A child that exits unreaped takes its CPU time with it: never report a negative share.
        process_percent = max(0.0, process_cpu_s - self._process_cpu_s) / max(seconds, 1e-9) * 100
        self._process_cpu_s = process_cpu_s
        return {
            "cpu_percent": overall,
            "per_cpu_percent": per_cpu,
            "cpu_mhz": _cpu_mhz(),
            "process_cpu_percent": round(process_percent, 1),
            "process_rss_mb": _process_tree_rss_mb(self._tree),
            "load_1m": _load_1m(),
        }


class _GpuReader:
    """NVML readings for a few GPU indices; NVML is started by `open` and stopped by `close`."""

    def __init__(self, nvml: ModuleType | None, handles: list[tuple[int, Any]], error: str | None) -> None:
        self.nvml = nvml
        self.handles = handles
        self.error = error
        self.reason_names = clock_event_reason_names(nvml) if nvml is not None else {}

    @classmethod
    def open(cls, indices: Sequence[int]) -> _GpuReader:
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


def summarize_samples(spans: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """What the hardware did during a pass, from its HARDWARE sample spans (other spans are ignored).

    Means are weighted by each sample's duration, so a short closing sample counts little; fields
    a sample could not read (None) are left out.

    Args:
        spans: spans of a pass, e.g. `HardwareSampler.spans`.

    Returns:
        {"cpu": {...}, "gpu": {...}} with only the kinds that were sampled: for "cpu" the samples
        count, cpu_percent mean/max, cpu_mhz min/mean, process_cpu_percent mean, process_rss_mb
        max; for "gpu" (every GPU together) the samples count, the GPU indices, utilization_gpu
        mean/max, power_w mean, memory_used_mb max and every throttle reason seen.
    """
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        kind = span["attributes"].get("kind")
        if span["level"] == HARDWARE and kind in ("cpu", "gpu"):
            by_kind.setdefault(kind, []).append(span)
    summary: dict[str, Any] = {}
    if "cpu" in by_kind:
        cpu = by_kind["cpu"]
        summary["cpu"] = {
            "samples": len(cpu),
            "cpu_percent_mean": _weighted_mean(cpu, "cpu_percent"),
            "cpu_percent_max": _extreme(cpu, "cpu_percent", max),
            "cpu_mhz_min": _extreme(cpu, "cpu_mhz", min),
            "cpu_mhz_mean": _weighted_mean(cpu, "cpu_mhz"),
            "process_cpu_percent_mean": _weighted_mean(cpu, "process_cpu_percent"),
            "process_rss_mb_max": _extreme(cpu, "process_rss_mb", max),
        }
    if "gpu" in by_kind:
        gpu = by_kind["gpu"]
        seen = {reason for span in gpu for reason in span["attributes"].get("throttle_reasons") or []}
        summary["gpu"] = {
            "samples": len(gpu),
            "gpu_indices": sorted({span["attributes"]["gpu_index"] for span in gpu}),
            "utilization_gpu_mean": _weighted_mean(gpu, "utilization_gpu"),
            "utilization_gpu_max": _extreme(gpu, "utilization_gpu", max),
            "power_w_mean": _weighted_mean(gpu, "power_w"),
            "memory_used_mb_max": _extreme(gpu, "memory_used_mb", max),
            "throttle_reasons": sorted(seen),
        }
    return summary


def _weighted_mean(spans: list[dict[str, Any]], field: str) -> float | None:
    pairs = [
        (span["attributes"][field], max(span["end_ns"] - span["start_ns"], 1))
        for span in spans
        if span["attributes"].get(field) is not None
    ]
    total = sum(weight for _, weight in pairs)
    return round(sum(value * weight for value, weight in pairs) / total, 2) if pairs else None


def _extreme(spans: list[dict[str, Any]], field: str, pick: Callable[[list[float]], float]) -> float | None:
    values = [span["attributes"][field] for span in spans if span["attributes"].get(field) is not None]
    return pick(values) if values else None


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


def _busy_times(times: Any) -> tuple[float, float]:
    """(busy, total) seconds of a psutil cpu_times reading, counted as psutil.cpu_percent does."""
    # Linux counts guest time inside user and nice already; iowait is idle waiting on a disk.
    total = sum(times) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)
    idle = times.idle + getattr(times, "iowait", 0.0)
    return total - idle, total


def _busy_percent(before: tuple[float, float], after: tuple[float, float]) -> float:
    """The busy share, 0-100, between two (busy, total) readings."""
    elapsed = after[1] - before[1]
    if elapsed <= 0:
        return 0.0
    return round(min(100.0, max(0.0, (after[0] - before[0]) / elapsed * 100)), 1)


def _sum_times(per_cpu: list[Any]) -> tuple[float, float]:
    pairs = [_busy_times(times) for times in per_cpu]
    return sum(busy for busy, _ in pairs), sum(total for _, total in pairs)


def _process_tree(process: psutil.Process) -> list[psutil.Process]:
    try:
        return [process, *process.children(recursive=True)]
    except psutil.Error:
        return [process]


def _process_tree_cpu_s(tree: list[psutil.Process]) -> float:
    seconds = 0.0
    for member in tree:
        try:
            times = member.cpu_times()
        except psutil.Error:
            continue
        # children_* hold reaped children, so a child's time stays counted after it exits.
        seconds += times.user + times.system + times.children_user + times.children_system
    return seconds


def _process_tree_rss_mb(tree: list[psutil.Process]) -> float | None:
    total = 0
    for position, member in enumerate(tree):
        try:
            total += member.memory_info().rss
        except psutil.Error:
            if position == 0:
                return None
    return round(total / MEBIBYTE, 1)


def _cpu_mhz() -> float | None:
    try:
        frequency = psutil.cpu_freq()
    except (psutil.Error, OSError, NotImplementedError):
        return None
    return round(float(frequency.current), 1) if frequency is not None and frequency.current else None


def _load_1m() -> float | None:
    try:
        return round(float(psutil.getloadavg()[0]), 2)
    except (psutil.Error, OSError, AttributeError):
        return None
