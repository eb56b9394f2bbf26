"""The HARDWARE trace level: a sampler thread that records what the CPUs and NVIDIA GPUs were doing
while a profiling pass ran, as spans, and the summary of those samples attached to the pass span.

CPU figures come from psutil (`cpu`); GPU figures from NVML through nvidia-ml-py (`nvml`), which is
imported only when GPUs are asked for. Each sample is a span covering the interval since the
previous sample, on the tracer's clock, so samples line up with the pass's inference spans.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import Any

from mlscope.runtime.trace.cpu import CpuReader
from mlscope.runtime.trace.nvml import GpuReader
from mlscope.runtime.trace.spans import Tracer

__all__ = ["MIN_SAMPLE_S", "HardwareSampler", "summarize_samples"]

log = logging.getLogger("mlscope.trace.hardware")

HARDWARE = "HARDWARE"

# Linux counts CPU time in 10 ms ticks: a closing sample shorter than two ticks would report noise.
MIN_SAMPLE_S = 0.02


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
        self._cpu: CpuReader | None = None
        self._gpus: GpuReader | None = None

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
            self._gpus = GpuReader.open(self.gpu_indices)
            self.gpu_error = self._gpus.error
        try:
            self._cpu = CpuReader()
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
