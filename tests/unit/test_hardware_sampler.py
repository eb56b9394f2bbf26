"""The HARDWARE sampler: real psutil readings while a thread burns CPU, the no-op at lower trace
levels, and the GPU path through a fake `pynvml` (these machines have no GPU)."""

from __future__ import annotations

import itertools
import sys
import threading
import time
from types import ModuleType, SimpleNamespace
from typing import Any

import psutil
import pynvml
import pytest

from mlscope.runtime.trace import Tracer
from mlscope.runtime.trace.hardware import HardwareSampler, summarize_samples
from mlscope.runtime.trace.nvml import clock_event_reason_names, decode_clock_event_reasons

PASS_ATTRIBUTES = {"pass": "LIBRARY", "batch_size": 1}
SAMPLER_THREAD = "mlscope-hardware-sampler"
BURN_SECONDS = 0.6


def burn_cpu(seconds: float, spent: list[float]) -> None:
    """Spin in Python for `seconds` of wall time; append the CPU time this thread used."""
    started, cpu_started = time.perf_counter(), time.thread_time()
    while time.perf_counter() - started < seconds:
        sum(range(1000))
    spent.append(time.thread_time() - cpu_started)


def hardware_spans(tracer: Tracer, name: str) -> list[dict[str, Any]]:
    return sorted((s for s in tracer.spans if s["name"] == name), key=lambda s: s["start_ns"])


def sampler_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == SAMPLER_THREAD]


def test_cpu_samples_tile_the_sampler_lifetime_and_see_a_burning_thread() -> None:
    # Given a HARDWARE tracer and a thread burning CPU while the sampler runs
    tracer = Tracer("HARDWARE")
    own_process = psutil.Process()
    spent: list[float] = []
    burner = threading.Thread(target=burn_cpu, args=(BURN_SECONDS, spent))
    # When
    before_ns = tracer.clock.now()
    cpu_before = sum(own_process.cpu_times()[:2])
    sampler = HardwareSampler(tracer, parent_id="pass-span", interval_s=0.1, attributes=PASS_ATTRIBUTES)
    with sampler:
        burner.start()
        burner.join()
    cpu_used = sum(own_process.cpu_times()[:2]) - cpu_before
    after_ns = tracer.clock.now()
    # Then there is one span per sample, each starting where the previous ended, within the lifetime
    cpu = hardware_spans(tracer, "cpu")
    assert sampler.stop() == len(cpu) >= 3
    assert sampler.spans == [s for s in tracer.spans if s["level"] == "HARDWARE"]
    assert before_ns <= cpu[0]["start_ns"] and cpu[-1]["end_ns"] <= after_ns
    assert all(prev["end_ns"] == nxt["start_ns"] for prev, nxt in itertools.pairwise(cpu))
    assert all(s["end_ns"] > s["start_ns"] for s in cpu)
    # And each span hangs under the pass, carrying the pass attributes and every CPU field
    ncpu = psutil.cpu_count()
    for span in cpu:
        attributes = span["attributes"]
        assert span["parent_id"] == "pass-span" and span["level"] == "HARDWARE"
        assert (
            attributes["kind"] == "cpu" and attributes["pass"] == "LIBRARY" and attributes["batch_size"] == 1
        )
        assert 0 <= attributes["cpu_percent"] <= 100
        assert len(attributes["per_cpu_percent"]) == ncpu
        assert all(0 <= value <= 100 for value in attributes["per_cpu_percent"])
        assert attributes["process_rss_mb"] > 0
        assert attributes["cpu_mhz"] is None or attributes["cpu_mhz"] > 0
        assert attributes["load_1m"] is None or attributes["load_1m"] >= 0
    # And the process CPU the spans add up to is the CPU this process used, burner included
    sampled_cpu_s = sum(
        s["attributes"]["process_cpu_percent"] / 100 * (s["end_ns"] - s["start_ns"]) / 1e9 for s in cpu
    )
    assert max(s["attributes"]["process_cpu_percent"] for s in cpu) > 0
    assert sampled_cpu_s <= cpu_used + 0.05
    assert sampled_cpu_s >= spent[0] - 0.05
    # And the whole machine was at least as busy as this process (its busy time includes ours)
    machine_busy_s = sum(
        s["attributes"]["cpu_percent"] / 100 * ncpu * (s["end_ns"] - s["start_ns"]) / 1e9 for s in cpu
    )
    assert machine_busy_s >= sampled_cpu_s - 0.05 * len(cpu)
    # And the sampling thread is gone
    assert sampler_threads() == []


def test_a_tracer_below_hardware_starts_no_thread_and_records_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a LIBRARY tracer, and a pynvml that would show whether NVML was touched
    nvml = FakeNvml(devices=[FakeDevice()])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    tracer = Tracer("LIBRARY")
    threads_before = threading.active_count()
    # When
    sampler = HardwareSampler(tracer, parent_id="pass-span", interval_s=0.01, gpu_indices=[0])
    with sampler:
        assert threading.active_count() == threads_before
        assert sampler_threads() == []
        time.sleep(0.05)
    # Then
    assert sampler.stop() == 0
    assert tracer.spans == [] and sampler.spans == []
    assert nvml.calls == []


class FakeNVMLError(Exception):
    """nvidia-ml-py's NVMLError: carries the NVML return code as `value`."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value


NVML_ERROR_NOT_SUPPORTED = 3
GIB = 2**30


class FakeDevice:
    """One GPU's readings in NVML's own units (bytes, milliwatts, MHz, °C, percent)."""

    def __init__(self, failing: tuple[str, ...] = (), reasons_mask: int = 0, **readings: Any) -> None:
        self.failing = failing
        self.reasons_mask = reasons_mask
        self.readings = {
            "gpu": 87,
            "memory": 41,
            "used": 3 * GIB,
            "total": 16 * GIB,
            "power_mw": 123_456,
            "sm_mhz": 1410,
            "mem_mhz": 1215,
            "temperature": 66,
            "processes": 2,
            **readings,
        }


class FakeNvml(ModuleType):
    """A `pynvml` with nvidia-ml-py's documented names, signatures and units, answering from
    FakeDevice objects; records every call. Stands in for NVML because these machines have no GPU."""

    NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM
    NVML_CLOCK_MEM = pynvml.NVML_CLOCK_MEM
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU
    NVMLError = FakeNVMLError

    def __init__(
        self, devices: list[FakeDevice], *, init_fails: bool = False, event_reasons: bool = True
    ) -> None:
        super().__init__("pynvml")
        self.devices = devices
        self.init_fails = init_fails
        self.calls: list[str] = []
        # The real module's reason constants, both families, so decoding is checked against them.
        for name in dir(pynvml):
            if name.startswith(("nvmlClocksEventReason", "nvmlClocksThrottleReason")):
                setattr(self, name, getattr(pynvml, name))
        if event_reasons:
            self.nvmlDeviceGetCurrentClocksEventReasons = self._reasons
        else:
            self.nvmlDeviceGetCurrentClocksEventReasons = self._no_event_reasons

    def _device(self, handle: FakeDevice, field: str) -> FakeDevice:
        self.calls.append(field)
        if field in handle.failing:
            raise FakeNVMLError(NVML_ERROR_NOT_SUPPORTED)
        return handle

    def nvmlInit(self) -> None:
        self.calls.append("init")
        if self.init_fails:
            raise FakeNVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    def nvmlShutdown(self) -> None:
        self.calls.append("shutdown")

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeDevice:
        return self.devices[index]

    def nvmlDeviceGetUtilizationRates(self, handle: FakeDevice) -> SimpleNamespace:
        r = self._device(handle, "utilization").readings
        return SimpleNamespace(gpu=r["gpu"], memory=r["memory"])

    def nvmlDeviceGetMemoryInfo(self, handle: FakeDevice) -> SimpleNamespace:
        r = self._device(handle, "memory").readings
        return SimpleNamespace(total=r["total"], free=r["total"] - r["used"], used=r["used"])

    def nvmlDeviceGetPowerUsage(self, handle: FakeDevice) -> int:
        return int(self._device(handle, "power").readings["power_mw"])

    def nvmlDeviceGetClockInfo(self, handle: FakeDevice, clock_type: int) -> int:
        r = self._device(handle, "clock").readings
        return int(r["sm_mhz"] if clock_type == self.NVML_CLOCK_SM else r["mem_mhz"])

    def nvmlDeviceGetTemperature(self, handle: FakeDevice, sensor: int) -> int:
        assert sensor == self.NVML_TEMPERATURE_GPU
        return int(self._device(handle, "temperature").readings["temperature"])

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeDevice) -> list[SimpleNamespace]:
        count = self._device(handle, "processes").readings["processes"]
        return [SimpleNamespace(pid=1000 + i, usedGpuMemory=GIB) for i in range(count)]

    def _reasons(self, handle: FakeDevice) -> int:
        return self._device(handle, "event_reasons").reasons_mask

    def _no_event_reasons(self, handle: FakeDevice) -> int:
        self.calls.append("event_reasons")
        raise FakeNVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: FakeDevice) -> int:
        return self._device(handle, "throttle_reasons").reasons_mask


def sample_gpus(nvml: FakeNvml, indices: list[int], seconds: float = 0.15) -> tuple[Tracer, int]:
    tracer = Tracer("HARDWARE")
    sampler = HardwareSampler(
        tracer, parent_id="pass-span", interval_s=0.03, gpu_indices=indices, attributes=PASS_ATTRIBUTES
    )
    with sampler:
        time.sleep(seconds)
    return tracer, sampler.stop()


def test_gpu_readings_land_in_attributes_in_watts_and_megabytes(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given two GPUs; the second cannot read its temperature
    mask = pynvml.nvmlClocksEventReasonSwPowerCap | pynvml.nvmlClocksEventReasonHwThermalSlowdown
    devices = [
        FakeDevice(reasons_mask=mask),
        FakeDevice(failing=("temperature",), gpu=12, power_mw=70_250, used=GIB // 2),
    ]
    nvml = FakeNvml(devices)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    # When
    tracer, samples = sample_gpus(nvml, [0, 1])
    # Then every sample gave one span per GPU, on the CPU span's interval
    cpu = hardware_spans(tracer, "cpu")
    assert samples == len(cpu) >= 2
    for index, device in enumerate(devices):
        spans = hardware_spans(tracer, f"gpu:{index}")
        assert [(s["start_ns"], s["end_ns"]) for s in spans] == [(s["start_ns"], s["end_ns"]) for s in cpu]
        r = device.readings
        for span in spans:
            attributes = span["attributes"]
            assert span["parent_id"] == "pass-span" and span["level"] == "HARDWARE"
            assert attributes["pass"] == "LIBRARY" and attributes["batch_size"] == 1
            assert attributes["kind"] == "gpu" and attributes["gpu_index"] == index
            assert (
                attributes["utilization_gpu"] == r["gpu"] and attributes["utilization_memory"] == r["memory"]
            )
            assert attributes["power_w"] == pytest.approx(r["power_mw"] / 1000)
            assert attributes["memory_used_mb"] == pytest.approx(r["used"] / 2**20)
            assert attributes["memory_total_mb"] == pytest.approx(r["total"] / 2**20)
            assert (
                attributes["sm_clock_mhz"] == r["sm_mhz"] and attributes["memory_clock_mhz"] == r["mem_mhz"]
            )
            assert attributes["processes"] == r["processes"]
    # And the bitmask is decoded to the names of nvidia-ml-py's constants
    first = hardware_spans(tracer, "gpu:0")[0]["attributes"]
    assert first["throttle_reasons"] == ["SwPowerCap", "HwThermalSlowdown"]
    assert first["temperature_c"] == devices[0].readings["temperature"] and "nvml_errors" not in first
    # And the failing call left its field None and named it, without stopping the other fields
    second = hardware_spans(tracer, "gpu:1")[0]["attributes"]
    assert second["temperature_c"] is None and second["nvml_errors"] == ["temperature_c"]
    assert second["throttle_reasons"] == []
    # And NVML was started once and shut down once, at the end
    assert nvml.calls.count("init") == 1 and nvml.calls[0] == "init"
    assert nvml.calls.count("shutdown") == 1 and nvml.calls[-1] == "shutdown"
    # And the summary sees both GPUs and the reasons
    summary = summarize_samples(tracer.spans)["gpu"]
    assert summary["gpu_indices"] == [0, 1]
    assert summary["throttle_reasons"] == ["HwThermalSlowdown", "SwPowerCap"]
    assert summary["utilization_gpu_max"] == max(d.readings["gpu"] for d in devices)


def test_an_old_driver_without_clock_event_reasons_falls_back_to_throttle_reasons(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a driver whose NVML lacks the "ClocksEventReasons" entry point (before 535)
    mask = pynvml.nvmlClocksThrottleReasonGpuIdle | pynvml.nvmlClocksThrottleReasonBoardLimit
    nvml = FakeNvml([FakeDevice(reasons_mask=mask)], event_reasons=False)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    # When
    tracer, _ = sample_gpus(nvml, [0], seconds=0.05)
    # Then the throttle-reasons call answered, BoardLimit named from the older constants
    attributes = hardware_spans(tracer, "gpu:0")[0]["attributes"]
    assert attributes["throttle_reasons"] == ["GpuIdle", "BoardLimit"]
    assert "nvml_errors" not in attributes
    assert "throttle_reasons" in nvml.calls


@pytest.mark.parametrize("broken", ["init fails", "not installed"])
def test_gpus_that_cannot_be_reached_leave_the_cpu_samples_alone(
    broken: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given NVML that does not start, or no nvidia-ml-py at all
    nvml = FakeNvml([FakeDevice()], init_fails=True)
    monkeypatch.setitem(sys.modules, "pynvml", nvml if broken == "init fails" else None)
    tracer = Tracer("HARDWARE")
    # When
    sampler = HardwareSampler(tracer, parent_id="pass-span", interval_s=0.03, gpu_indices=[0])
    with sampler:
        time.sleep(0.1)
    # Then CPU samples are kept, no GPU span is made, and the sampler says why
    assert sampler.stop() == len(hardware_spans(tracer, "cpu")) >= 1
    assert hardware_spans(tracer, "gpu:0") == []
    assert sampler.gpu_error is not None
    assert ("NVML did not start" if broken == "init fails" else "nvidia-ml-py") in sampler.gpu_error
    assert "shutdown" not in nvml.calls


def test_reason_names_come_from_the_installed_nvidia_ml_py() -> None:
    names = clock_event_reason_names(pynvml)
    # The deprecated alias of bit 2 does not replace its current name; None and All are masks, not bits
    assert names[pynvml.nvmlClocksEventReasonApplicationsClocksSetting] == "ApplicationsClocksSetting"
    assert "None" not in names.values() and "All" not in names.values()
    assert all(bit & (bit - 1) == 0 for bit in names)
    every_bit = pynvml.nvmlClocksThrottleReasonAll
    assert decode_clock_event_reasons(every_bit, names) == [names[bit] for bit in sorted(names)]
    unnamed = 1 << max(names).bit_length()
    assert decode_clock_event_reasons(unnamed | pynvml.nvmlClocksEventReasonGpuIdle, names) == [
        "GpuIdle",
        f"0x{unnamed:x}",
    ]


def span(kind: str, start_ns: int, end_ns: int, level: str = "HARDWARE", **attributes: Any) -> dict[str, Any]:
    return {
        "name": kind,
        "level": level,
        "start_ns": start_ns,
        "end_ns": end_ns,
        "attributes": {"kind": kind, **attributes},
    }


def test_summaries_weight_means_by_sample_duration_and_skip_missing_values() -> None:
    # Given a long busy sample, a short idle one, one without a frequency, and a non-hardware span
    long_s, short_s = 300, 100
    samples = [
        span(
            "cpu", 0, long_s, cpu_percent=80.0, cpu_mhz=2000.0, process_cpu_percent=90.0, process_rss_mb=50.0
        ),
        span(
            "cpu",
            long_s,
            long_s + short_s,
            cpu_percent=20.0,
            cpu_mhz=None,
            process_cpu_percent=10.0,
            process_rss_mb=70.0,
        ),
        span("cpu", 0, 10, level="MODEL", cpu_percent=100.0),
        span(
            "gpu",
            0,
            long_s,
            gpu_index=0,
            utilization_gpu=None,
            power_w=None,
            memory_used_mb=None,
            throttle_reasons=None,
        ),
    ]
    # When
    summary = summarize_samples(samples)
    # Then
    cpu = summary["cpu"]
    assert cpu["samples"] == 2
    assert cpu["cpu_percent_mean"] == pytest.approx((80 * long_s + 20 * short_s) / (long_s + short_s))
    assert cpu["cpu_percent_max"] == 80.0
    assert cpu["cpu_mhz_min"] == cpu["cpu_mhz_mean"] == 2000.0
    assert cpu["process_rss_mb_max"] == 70.0
    assert summary["gpu"]["utilization_gpu_mean"] is None and summary["gpu"]["throttle_reasons"] == []
    assert summarize_samples([]) == {}
