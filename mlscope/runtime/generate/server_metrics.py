"""A server's own metrics beside the client's figures: a thread samples a Prometheus text-format
endpoint (vLLM's, SGLang's, TGI's or llama.cpp's `/metrics`) at a fixed interval while the measured
requests run, and maps each server's names to one vocabulary (docs/generate.md, "Server metrics"):

- kv_cache_usage, the fraction of the KV cache in use: vLLM's kv_cache_usage_perc (before v1
  gpu_cache_usage_perc), SGLang's token_usage, llama.cpp's kv_cache_usage_ratio; TGI gives none;
- requests_running: vLLM's num_requests_running, SGLang's num_running_reqs, llama.cpp's
  requests_processing;
- requests_waiting: vLLM's num_requests_waiting, SGLang's num_queue_reqs, TGI's queue_size,
  llama.cpp's requests_deferred;
- batch_size, the running batch: TGI's batch_current_size;
- prompt_tokens_per_s and generation_tokens_per_s, rates of the counters: vLLM's and SGLang's
  prompt_tokens_total and generation_tokens_total, llama.cpp's prompt_tokens_total and
  tokens_predicted_total, TGI's request_input_length_sum and request_generated_tokens_sum.

Every other series is left out. A name given under several label sets (one per model or engine) is
summed, except a fraction, whose largest is kept. Beside each sample the client's requests in flight
are read, so the series can be drawn against the requests on one time axis.

Sampling costs the measurement little: one GET per interval, and only the lines whose name is mapped
reach prometheus_client's parser; the thread's own CPU time per sample is reported. A URL that does
not answer never stops the run: the document says what went wrong (`missing`).
"""

from __future__ import annotations

import math
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

__all__ = ["GAUGES", "RATES", "VOCABULARY", "MetricsSampler", "map_exposition", "parse_exposition"]

# (canonical name, how several label sets combine)
_Gauge = tuple[str, str]

#: Per source, its gauge names → (canonical name, "sum" or "max").
GAUGES: dict[str, dict[str, _Gauge]] = {
    "vllm": {
        "vllm:kv_cache_usage_perc": ("kv_cache_usage", "max"),
        "vllm:gpu_cache_usage_perc": ("kv_cache_usage", "max"),
        "vllm:num_requests_running": ("requests_running", "sum"),
        "vllm:num_requests_waiting": ("requests_waiting", "sum"),
    },
    "sglang": {
        "sglang:token_usage": ("kv_cache_usage", "max"),
        "sglang:num_running_reqs": ("requests_running", "sum"),
        "sglang:num_queue_reqs": ("requests_waiting", "sum"),
    },
    "tgi": {
        "tgi_queue_size": ("requests_waiting", "sum"),
        "tgi_batch_current_size": ("batch_size", "sum"),
    },
    "llamacpp": {
        "llamacpp:kv_cache_usage_ratio": ("kv_cache_usage", "max"),
        "llamacpp:requests_processing": ("requests_running", "sum"),
        "llamacpp:requests_deferred": ("requests_waiting", "sum"),
    },
}

#: Per source, its counter names → the canonical name of their rate (per second).
RATES: dict[str, dict[str, str]] = {
    "vllm": {
        "vllm:prompt_tokens_total": "prompt_tokens_per_s",
        "vllm:generation_tokens_total": "generation_tokens_per_s",
    },
    "sglang": {
        "sglang:prompt_tokens_total": "prompt_tokens_per_s",
        "sglang:generation_tokens_total": "generation_tokens_per_s",
    },
    "tgi": {
        "tgi_request_input_length_sum": "prompt_tokens_per_s",
        "tgi_request_generated_tokens_sum": "generation_tokens_per_s",
    },
    "llamacpp": {
        "llamacpp:prompt_tokens_total": "prompt_tokens_per_s",
        "llamacpp:tokens_predicted_total": "generation_tokens_per_s",
    },
}

#: The canonical names, in the order a result lists them.
VOCABULARY = (
    "kv_cache_usage",
    "requests_running",
    "requests_waiting",
    "batch_size",
    "prompt_tokens_per_s",
    "generation_tokens_per_s",
)

_SOURCE_OF = {name: source for table in (GAUGES, RATES) for source, names in table.items() for name in names}
# A sample line's name ends at its labels or at the space before its value.
_NAME_ENDS = ("{", " ", "\t")
# Most samples a series keeps: past it, every other one is dropped and the interval doubles.
MAX_SAMPLES = 4096
# Longest wait for one answer; a slower one counts as a failed sample.
_TIMEOUT_S = 2.0


def _name(line: str) -> str:
    end = len(line)
    for mark in _NAME_ENDS:
        found = line.find(mark)
        if found != -1:
            end = min(end, found)
    return line[:end]


def parse_exposition(text: str) -> dict[str, list[float]]:
    """The values of the mapped sample names in a Prometheus text exposition, one per label set.

    Only the lines of mapped names are parsed (prometheus_client's parser, when installed; else the
    value after the labels), so a server's hundreds of histogram buckets cost a string test each.
    """
    wanted = [line for line in text.splitlines() if line and line[0] != "#" and _name(line) in _SOURCE_OF]
    values: dict[str, list[float]] = {}
    if not wanted:
        return values
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:  # the farm's extra brings it; a bare install reads the values itself
        for line in wanted:
            try:
                value = float(line.rsplit("}", 1)[-1].split()[0])
            except (ValueError, IndexError):
                continue
            values.setdefault(_name(line), []).append(value)
        return values
    try:
        families = list(text_string_to_metric_families("\n".join(wanted) + "\n"))
    except ValueError:
        return values
    for family in families:
        for sample in family.samples:
            if sample.name in _SOURCE_OF:
                values.setdefault(sample.name, []).append(float(sample.value))
    return values


def map_exposition(text: str) -> tuple[str | None, dict[str, float], dict[str, float]]:
    """(source, gauges, counters) of one exposition in the canonical names: the source whose names
    matched most, its gauges combined over label sets, its counters summed (rates come from two
    samples)."""
    values = parse_exposition(text)
    if not values:
        return None, {}, {}
    counts: dict[str, int] = {}
    for name in values:
        counts[_SOURCE_OF[name]] = counts.get(_SOURCE_OF[name], 0) + 1
    source = max(counts, key=lambda s: counts[s])
    gauges: dict[str, float] = {}
    for name, (canonical, combine) in GAUGES[source].items():
        if name in values and canonical not in gauges:
            gauges[canonical] = max(values[name]) if combine == "max" else sum(values[name])
    counters = {canonical: sum(values[name]) for name, canonical in RATES[source].items() if name in values}
    return source, gauges, counters


class MetricsSampler:
    """Samples `url` every `interval_s` in a daemon thread from `start()` to `stop()`.

    Args:
        url: a Prometheus text-format endpoint.
        interval_s: seconds between samples (a sample due while the last one is still awaited is
            skipped, never queued).
        in_flight: the client's requests in flight, read beside each sample.
    """

    def __init__(self, url: str, interval_s: float, in_flight: Callable[[], int] | None = None) -> None:
        self.url = url
        self.interval_s = float(interval_s)
        self._in_flight = in_flight
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start_ns = 0
        self._t_s: list[float] = []
        self._clients: list[int | None] = []
        self._gauges: list[dict[str, float]] = []
        self._counters: list[dict[str, float]] = []
        self._sources: dict[str, int] = {}
        self._failed = 0
        self._first_error: str | None = None
        self._cpu_ns = 0
        self._attempts = 0

    def start(self) -> None:
        """Take the first sample now, then one per interval."""
        if self._thread is not None:
            return
        self._start_ns = time.perf_counter_ns()
        self._thread = threading.Thread(target=self._run, name="server-metrics", daemon=True)
        self._thread.start()

    def stop(self) -> dict[str, Any]:
        """Stop sampling; the `server_metrics` document (docs/generate.md, "Server metrics")."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(_TIMEOUT_S + 1.0)
        return self.document()

    def _run(self) -> None:
        due = 0.0
        while not self._stop.is_set():
            self._sample()
            if len(self._t_s) >= MAX_SAMPLES:
                self._thin()
            # The next sample is due one interval after this one's due time; a late sample skips
            # the times it missed.
            elapsed = (time.perf_counter_ns() - self._start_ns) / 1e9
            due += self.interval_s
            if due < elapsed:
                due += math.ceil((elapsed - due) / self.interval_s) * self.interval_s
            self._stop.wait(due - elapsed)

    def _thin(self) -> None:
        """Every other sample dropped, the interval doubled: a long run keeps its whole span."""
        for series in (self._t_s, self._clients, self._gauges, self._counters):
            del series[1::2]
        self.interval_s *= 2

    def _sample(self) -> None:
        cpu = time.thread_time_ns()
        self._attempts += 1
        sent = time.perf_counter_ns()
        clients = self._in_flight() if self._in_flight is not None else None
        try:
            request = urllib.request.Request(self.url, headers={"Accept": "text/plain"})
            with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as response:
                text = response.read().decode("utf-8", errors="replace")
        except (urllib.error.URLError, OSError, ValueError) as exc:
            self._failed += 1
            if self._first_error is None:
                self._first_error = _reason(exc)
            self._cpu_ns += time.thread_time_ns() - cpu
            return
        received = time.perf_counter_ns()
        source, gauges, counters = map_exposition(text)
        if source is None:
            if self._first_error is None:
                self._first_error = "answered with none of the metric names mlscope maps"
            self._failed += 1
        else:
            self._sources[source] = self._sources.get(source, 0) + 1
            # The sample's time: halfway between the request and its answer.
            self._t_s.append(round(((sent + received) / 2 - self._start_ns) / 1e9, 4))
            self._clients.append(clients)
            self._gauges.append(gauges)
            self._counters.append(counters)
        self._cpu_ns += time.thread_time_ns() - cpu

    def document(self) -> dict[str, Any]:
        """What was sampled so far, in the canonical names; `missing` says why there is nothing."""
        document: dict[str, Any] = {
            "url": self.url,
            "interval_s": self.interval_s,
            "samples": len(self._t_s),
            "failed_samples": self._failed,
            "cpu_ms_per_sample": round(self._cpu_ns / 1e6 / self._attempts, 4) if self._attempts else None,
        }
        if self._first_error is not None:
            document["first_error"] = self._first_error
        if not self._t_s:
            document["source"] = None
            document["missing"] = (
                f"no sample from {self.url}: {self._first_error}"
                if self._first_error
                else f"no sample from {self.url}: the run ended before the first answer"
            )
            return document
        document["source"] = max(self._sources, key=lambda s: self._sources[s])
        series: dict[str, list[float | None]] = {}
        for name in VOCABULARY:
            if any(name in gauges for gauges in self._gauges):
                series[name] = [gauges.get(name) for gauges in self._gauges]
            elif any(name in counters for counters in self._counters):
                series[name] = _rates(self._t_s, [counters.get(name) for counters in self._counters])
        document["t_s"] = list(self._t_s)
        document["series"] = series
        if any(c is not None for c in self._clients):
            document["client_in_flight"] = list(self._clients)
        document["peak"] = {
            name: max(known)
            for name, values in series.items()
            if (known := [v for v in values if v is not None])
        }
        return document


def _rates(t_s: list[float], counts: list[float | None]) -> list[float | None]:
    """Per sample, the counter's increase per second since the sample before (None for the first, a
    gap or a reset)."""
    rates: list[float | None] = [None]
    for i in range(1, len(t_s)):
        before, now, dt = counts[i - 1], counts[i], t_s[i] - t_s[i - 1]
        rates.append(
            None if before is None or now is None or now < before or dt <= 0 else (now - before) / dt
        )
    return rates


def _reason(exc: BaseException) -> str:
    """A failed sample's reason in a few words: the HTTP status, or what the connection said."""
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code}"
    reason = getattr(exc, "reason", None) or exc
    if isinstance(reason, TimeoutError) or "timed out" in str(reason):
        return f"no answer within {_TIMEOUT_S:g} s"
    text = getattr(reason, "strerror", None) or str(reason)
    return str(text).strip().lower()[:200] or type(exc).__name__
