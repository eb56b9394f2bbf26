"""Generation settings: what the generate scenario asks a model for, where, and what it must meet.

Defined once: the request validates a `generation` document with `GenerationSettings.from_dict`, and
the predictor runtime's driver reads the same dataclass. The arrival rate, the max-QPS search and the
certificate's percentile and confidence are the load settings' (`qps`, `find_max_qps`, `percentile`,
`confidence`, `seed`, `resolution`: mlscope.contract.load), shared with the server scenario.

Lengths are given as a fixed number (`128`), a distribution (`uniform:64-256`, `normal:128,32`) or a
list of lengths taken in order and cycled (what `--prompt-tokens file:PATH` becomes on the client:
a file is read where it is typed, never by a worker). Every draw is seeded, so two runs send the same
requests.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from mlscope.contract.bounds import Bound
from mlscope.contract.errors import UserError
from mlscope.contract.interactive import PRESETS
from mlscope.contract.section import SettingsSection
from mlscope.contract.trace import check_trace, trace_identity

__all__ = [
    "APIS",
    "ENDPOINT_FRAMEWORK",
    "ENDPOINT_PATTERN",
    "MAX_LENGTH",
    "MAX_LISTED_LENGTHS",
    "POOLING_APIS",
    "POOLING_SLO_METRICS",
    "SLO_METRICS",
    "GenerationSettings",
    "draw_lengths",
    "parse_lengths",
    "parse_slo",
    "read_lengths_file",
]

# The framework name of an evaluation that measures a model behind an endpoint (nothing loads here).
ENDPOINT_FRAMEWORK = "endpoint"
# The OpenAI-compatible APIs an endpoint is asked through.
APIS = ("chat", "completions", "embeddings", "rerank")
# The APIs that answer each request once, generating no tokens (embedding and reranking models, vLLM's
# "pooling" models): no TTFT or TPOT, no output length, a batch of inputs per request.
POOLING_APIS = ("embeddings", "rerank")
# What a service-level objective may bound, per request.
SLO_METRICS = ("ttft_ms", "tpot_ms", "e2e_ms")
# ... and for a pooling API, whose answer has no tokens to time.
POOLING_SLO_METRICS = ("e2e_ms",)
# Inputs per request beyond this are a typo (servers cap a batch far lower).
MAX_INPUTS_PER_REQUEST = 4096
# Settings only generation has: given with a pooling API, they are refused rather than ignored.
_GENERATE_ONLY = ("output_tokens", "ignore_eos")
# A length beyond this is a typo (no model has a context of a million tokens here).
MAX_LENGTH = 1_000_000
MAX_LISTED_LENGTHS = 100_000
# An endpoint: the base URL of an OpenAI-compatible API, in the characters of RFC 3986 (a host in
# punycode), no query, no fragment. Spelled out rather than as \S, which Python and JSON Schema's
# regular expressions read differently; `$` is read as the very end (the HTTP API's document says so).
_URL_CHARACTERS = r"-A-Za-z0-9._~%!$&'()*+,;=:@\[\]"
ENDPOINT_PATTERN = rf"^https?://[{_URL_CHARACTERS}]+(/[{_URL_CHARACTERS}/]*)?$"
_ENDPOINT = re.compile(ENDPOINT_PATTERN.removesuffix("$") + r"\Z")

_UNIFORM = re.compile(r"^uniform:(\d+)-(\d+)$")
_NORMAL = re.compile(r"^normal:(\d+(?:\.\d+)?),(\d+(?:\.\d+)?)$")
_LENGTH_FORMS = (
    "a number of tokens (128), uniform:LOW-HIGH, normal:MEAN,SD or file:PATH (one length per line)"
)


@dataclass(frozen=True)
class GenerationSettings(SettingsSection):
    """What the generate scenario sends, validated on construction.

    Attributes:
        requests: 32. The fewest requests measured per point (after the warm-up ones). A closed
            loop sends more until the median TPOT is stable (the measurement settings' stability,
            within max_seconds); with an SLO, at least what the certificate of the percentile needs
            when no request misses it.
        prompt_tokens: 128. Prompt length: a number, "uniform:LOW-HIGH", "normal:MEAN,SD" or a list.
        output_tokens: 64. Tokens generated per request, forced: end-of-sequence is ignored in
            process, and an endpoint that stops early fails the request (see ignore_eos).
        concurrency: 1. Requests in flight at once: a closed loop of this many clients, or under a
            Poisson rate (load qps) the most in flight (the others wait, and the wait counts).
        warmup_requests: 2. Requests run before the measured ones, not recorded.
        slo: the per-request objectives ({"ttft_ms": 200, "tpot_ms": 50}); a request meeting all of
            them counts toward goodput, and each bounded metric's percentile is certified.
        endpoint: an OpenAI-compatible base URL (http://host:port/v1): measure the model behind it,
            timed from this side, instead of loading it here.
        api: "chat" (POST /chat/completions), "completions" (POST /completions), or, for a model that
            generates no tokens, "embeddings" (POST /embeddings) or "rerank" (POST /rerank): these
            need an endpoint, time each answer end to end, and refuse the settings of generation
            (output_tokens, ignore_eos) and SLO bounds other than e2e_ms (docs/generate.md).
        inputs_per_request: 1. For embeddings, the texts embedded per request; for rerank, the
            documents ranked against the query. Each is a prompt of a drawn prompt_tokens length.
        endpoint_model: the model name sent to the endpoint; None for the evaluation's model.
        ignore_eos: also send `ignore_eos` and `min_tokens` (vLLM's and SGLang's extensions), so the
            server cannot stop before output_tokens; a server that refuses unknown fields says so.
        request_timeout_s: 120. A request with no byte for this long fails ("stalled").
        compare_served: also serve the model from its directory on this machine (`transformers
            serve`, started and stopped by the job), run the same requests against it, and report
            the serving overhead per metric (the measurement's generation.served and
            generation.serving_overhead).
        trace: a trace to replay (contract.trace: arrivals, lengths, shared blocks), read by the
            CLI from --trace FILE; its requests replace the drawn ones, sent on its schedule.
        trace_speed: 1. The trace's replay speed: its gaps between arrivals divided by this.
        turns: 1. Requests per conversation: each turn's prompt carries the turns before it (their
            prompts and answers) and a new user text; the turns of one conversation go one after
            the other, `concurrency` conversations at once.
        think_time_ms: 0. The pause between a turn's answer and the next turn.
        shared_prefix_tokens: 0. Tokens of a prefix every prompt starts with, one of
            `prefix_groups` prefixes (request i has prefix i mod groups), before its own text.
        prefix_groups: 1. Distinct shared prefixes.
        server_metrics: the URL of the endpoint's Prometheus metrics (http://host:8000/metrics),
            sampled while the measured requests run: KV-cache use, requests running and waiting,
            batch size, token rates, in one vocabulary whatever the server (vLLM, SGLang, TGI,
            llama.cpp). Needs `endpoint`: the servers --compare-served starts expose no metrics.
            docs/generate.md, "Server metrics".
        server_metrics_interval_s: 0.5. Seconds between two samples of server_metrics.
        preset: "interactive" (MLPerf Inference's Interactive scenario): the slo defaults to the
            model's p99 TTFT and TPOT caps (contract.interactive), certified at the 99th
            percentile; what the request fills in, the request check does (docs/generate.md).
    """

    SECTION: ClassVar[str] = "generation"
    BOUNDS: ClassVar[dict[str, Bound]] = {
        "requests": Bound(integer=True, low=1, high=100_000),
        "concurrency": Bound(integer=True, low=1, high=4096),
        "warmup_requests": Bound(integer=True, low=0, high=1000),
        "request_timeout_s": Bound(low=0, low_open=True, high=86_400),
        "trace_speed": Bound(low=0, low_open=True, high=1000),
        "turns": Bound(integer=True, low=1, high=1000),
        "think_time_ms": Bound(low=0, high=3_600_000),
        "shared_prefix_tokens": Bound(integer=True, low=0, high=MAX_LENGTH),
        "prefix_groups": Bound(integer=True, low=1, high=100_000),
        "server_metrics_interval_s": Bound(low=0.05, high=3600),
        "inputs_per_request": Bound(integer=True, low=1, high=MAX_INPUTS_PER_REQUEST),
    }

    requests: int = 32
    prompt_tokens: Any = 128
    output_tokens: Any = 64
    concurrency: int = 1
    warmup_requests: int = 2
    slo: dict[str, float] | None = None
    endpoint: str | None = None
    api: str = "chat"
    endpoint_model: str | None = None
    ignore_eos: bool = False
    request_timeout_s: float = 120.0
    compare_served: bool = False
    trace: dict[str, Any] | None = None
    trace_speed: float = 1.0
    turns: int = 1
    think_time_ms: float = 0.0
    shared_prefix_tokens: int = 0
    prefix_groups: int = 1
    server_metrics: str | None = None
    server_metrics_interval_s: float = 0.5
    inputs_per_request: int = 1
    preset: str | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> GenerationSettings:
        """Settings from a mapping (SettingsSection.from_dict), refusing a setting of generation
        given with a pooling API: what does not apply is said, not ignored.

        Raises:
            UserError: as SettingsSection.from_dict; output_tokens or ignore_eos given with api
                embeddings or rerank (`field` names the setting).
        """
        settings = super().from_dict(data)
        if settings.api in POOLING_APIS:
            for name in _GENERATE_ONLY:
                if name in (data or {}):
                    raise UserError(
                        f"generation setting {name} does not apply to api={settings.api!r}: it "
                        "generates no tokens (leave it out)",
                        field=name,
                    )
        return settings

    @property
    def pooling(self) -> bool:
        """Whether the API answers once, generating no tokens (embeddings, rerank)."""
        return self.api in POOLING_APIS

    def __post_init__(self) -> None:
        self._check_bounds()
        object.__setattr__(self, "prompt_tokens", parse_lengths(self.prompt_tokens, "prompt_tokens"))
        object.__setattr__(self, "output_tokens", parse_lengths(self.output_tokens, "output_tokens"))
        if self.slo is not None:
            object.__setattr__(self, "slo", parse_slo(self.slo))
        if self.endpoint is not None:
            _check_endpoint(self.endpoint)
        if self.api not in APIS:
            raise UserError(
                f"generation setting api={self.api!r} is invalid: expected one of {', '.join(APIS)}",
                field="api",
            )
        if self.endpoint_model is not None and (
            not isinstance(self.endpoint_model, str) or not 0 < len(self.endpoint_model) <= 1000
        ):
            raise UserError("generation setting endpoint_model must be a model name", field="endpoint_model")
        if not isinstance(self.ignore_eos, bool):
            raise UserError("generation setting ignore_eos must be true or false", field="ignore_eos")
        if not isinstance(self.compare_served, bool):
            raise UserError("generation setting compare_served must be true or false", field="compare_served")
        if self.server_metrics is not None:
            _check_server_metrics(self.server_metrics, self.endpoint)
        self._check_preset()
        if self.api in POOLING_APIS:
            self._check_pooling()
        elif self.inputs_per_request != 1:
            raise UserError(
                f"generation setting inputs_per_request applies to api embeddings or rerank, not "
                f"{self.api!r} (a generation request is one prompt)",
                field="inputs_per_request",
            )
        if self.compare_served and self.endpoint is not None:
            raise UserError(
                "compare_served serves the model loaded here; with an endpoint there is nothing to "
                "compare it with (drop one of them)",
                field="compare_served",
            )
        self._check_workload()

    def _check_preset(self) -> None:
        """The preset is a known one, for a generation API."""
        if self.preset is None:
            return
        if self.preset not in PRESETS:
            raise UserError(
                f"generation setting preset={self.preset!r} is invalid: expected one of {', '.join(PRESETS)}",
                field="preset",
            )
        if self.api in POOLING_APIS:
            raise UserError(
                f"preset {self.preset} caps TTFT and TPOT: api={self.api!r} generates no tokens",
                field="preset",
            )

    def _check_workload(self) -> None:
        """The trace, conversation and shared-prefix settings: each valid, and only those that
        combine (a trace sets every request itself)."""
        if self.trace is not None:
            object.__setattr__(self, "trace", check_trace(self.trace))
            if self.turns > 1 or self.shared_prefix_tokens:
                raise UserError(
                    "a trace sets each request's prompt itself: drop turns and shared_prefix_tokens",
                    field="trace",
                )
        elif self.trace_speed != 1.0:
            raise UserError("trace_speed scales a trace's arrivals: give a trace too", field="trace_speed")
        if self.prefix_groups > 1 and not self.shared_prefix_tokens:
            raise UserError(
                "prefix_groups groups the shared prefixes: give shared_prefix_tokens too",
                field="prefix_groups",
            )
        if self.think_time_ms and self.turns == 1:
            raise UserError("think_time_ms is the pause between turns: give turns > 1", field="think_time_ms")

    def workload(self) -> dict[str, Any] | None:
        """What the measurement records of a trace, conversation or shared-prefix workload (the
        trace by its file's name, SHA-256 and line count); None for plain drawn requests."""
        described: dict[str, Any] = {}
        if self.trace is not None:
            described["trace"] = {**trace_identity(self.trace), "speed": self.trace_speed}
        if self.turns > 1:
            described["sessions"] = {"turns": self.turns, "think_time_ms": self.think_time_ms}
        if self.shared_prefix_tokens:
            described["shared_prefix"] = {"tokens": self.shared_prefix_tokens, "groups": self.prefix_groups}
        return described or None

    def _check_pooling(self) -> None:
        """What an embeddings or rerank API refuses: no endpoint, a bound on tokens' timing, forced
        end-of-sequence (output_tokens given is refused by from_dict, where it is known given)."""
        if self.endpoint is None:
            raise UserError(
                f"generation setting api={self.api!r} measures a served model: give endpoint "
                "(--endpoint URL)",
                field="api",
            )
        if self.ignore_eos:
            raise UserError(
                f"generation setting ignore_eos does not apply to api={self.api!r}: it generates no "
                "tokens (leave it out)",
                field="ignore_eos",
            )
        for name, given in (
            ("trace", self.trace is not None),
            ("turns", self.turns != 1),
            ("shared_prefix_tokens", self.shared_prefix_tokens != 0),
        ):
            if given:
                raise UserError(
                    f"generation setting {name} shapes the prompts of a generation API, not "
                    f"api={self.api!r} (leave it out)",
                    field=name,
                )
        untimed = [metric for metric in self.slo or {} if metric not in POOLING_SLO_METRICS]
        if untimed:
            raise UserError(
                f"slo: {', '.join(untimed)} cannot bound api={self.api!r}, which answers once with no "
                f"tokens: bound {', '.join(POOLING_SLO_METRICS)}",
                field="slo",
            )

    def lengths(self, count: int, seed: int) -> tuple[list[int], list[int]]:
        """The prompt and output lengths of `count` requests, drawn with `seed`."""
        return (
            draw_lengths(self.prompt_tokens, count, seed),
            draw_lengths(self.output_tokens, count, seed + 1),
        )


def parse_lengths(value: Any, name: str) -> int | str | list[int]:
    """A length setting, checked: an integer, "uniform:LOW-HIGH", "normal:MEAN,SD" or a list.

    Raises:
        UserError: none of those, or a length outside [1, MAX_LENGTH]; `field` is `name`.
    """

    def bad(why: str) -> UserError:
        return UserError(f"generation setting {name}={value!r} is invalid: {why}", field=name)

    if isinstance(value, bool):
        raise bad(f"expected {_LENGTH_FORMS}")
    if isinstance(value, int):
        if not 1 <= value <= MAX_LENGTH:
            raise bad(f"expected a length in [1, {MAX_LENGTH}]")
        return value
    if isinstance(value, list):
        if not value or len(value) > MAX_LISTED_LENGTHS:
            raise bad(f"expected 1 to {MAX_LISTED_LENGTHS} lengths")
        for item in value:
            if isinstance(item, bool) or not isinstance(item, int) or not 1 <= item <= MAX_LENGTH:
                raise bad(f"every listed length must be an integer in [1, {MAX_LENGTH}], got {item!r}")
        return list(value)
    if not isinstance(value, str):
        raise bad(f"expected {_LENGTH_FORMS}")
    text = value.strip()
    if text.isdigit():
        return parse_lengths(int(text), name)
    if match := _UNIFORM.match(text):
        low, high = int(match[1]), int(match[2])
        if not 1 <= low <= high <= MAX_LENGTH:
            raise bad(f"expected 1 ≤ LOW ≤ HIGH ≤ {MAX_LENGTH}")
        return text
    if match := _NORMAL.match(text):
        mean = float(match[1])
        if not 1 <= mean <= MAX_LENGTH:
            raise bad(f"expected a mean in [1, {MAX_LENGTH}]")
        return text
    if text.startswith("file:"):
        raise bad(
            "a file of lengths is read by the CLI (mlscope run --prompt-tokens file:PATH); send the list"
        )
    raise bad(f"expected {_LENGTH_FORMS}")


def read_lengths_file(path: str, name: str) -> list[int]:
    """The lengths in a file, one or more per line (whitespace- or comma-separated; # comments).

    Raises:
        UserError: the file cannot be read, is empty, or holds something else than lengths.
    """
    try:
        text = Path(path).expanduser().read_text()
    except OSError as exc:
        raise UserError(f"{name}: cannot read the lengths file {path}: {exc.strerror}", field=name) from None
    lengths: list[int] = []
    for number, line in enumerate(text.splitlines(), 1):
        for token in re.split(r"[\s,]+", line.partition("#")[0].strip()):
            if not token:
                continue
            if not token.isdigit():
                raise UserError(f"{name}: {path} line {number}: {token!r} is not a length", field=name)
            lengths.append(int(token))
    if not lengths:
        raise UserError(f"{name}: {path} holds no lengths", field=name)
    result = parse_lengths(lengths, name)
    assert isinstance(result, list)
    return result


def draw_lengths(spec: int | str | list[int], count: int, seed: int) -> list[int]:
    """`count` lengths from a parsed spec: a fixed one, seeded draws, or a list cycled in order."""
    if isinstance(spec, int):
        return [spec] * count
    if isinstance(spec, list):
        return [spec[i % len(spec)] for i in range(count)]
    rng = random.Random(seed)
    if match := _UNIFORM.match(spec):
        low, high = int(match[1]), int(match[2])
        return [rng.randint(low, high) for _ in range(count)]
    match = _NORMAL.match(spec)
    assert match is not None, spec
    mean, sd = float(match[1]), float(match[2])
    return [min(MAX_LENGTH, max(1, round(rng.gauss(mean, sd)))) for _ in range(count)]


def parse_slo(value: Any) -> dict[str, float]:
    """Service-level objectives from "ttft_ms=200,tpot_ms=50" or a mapping.

    Raises:
        UserError: not of that form, a metric other than ttft_ms, tpot_ms or e2e_ms, or a bound that
            is not a positive number; `field` is "slo".
    """
    known = ", ".join(SLO_METRICS)
    if isinstance(value, str):
        pairs: dict[str, Any] = {}
        for part in filter(None, (p.strip() for p in value.split(","))):
            key, sep, number = part.partition("=")
            if not sep:
                raise UserError(
                    f"slo {value!r}: {part!r} is not METRIC=MS (e.g. ttft_ms=200,tpot_ms=50)", field="slo"
                )
            try:
                pairs[key.strip()] = float(number)
            except ValueError:
                raise UserError(
                    f"slo {value!r}: {number.strip()!r} is not a number of ms", field="slo"
                ) from None
        value = pairs
    if not isinstance(value, dict) or not value:
        raise UserError(f"slo must bound at least one of {known} (e.g. ttft_ms=200,tpot_ms=50)", field="slo")
    slo: dict[str, float] = {}
    for key, bound in value.items():
        if key not in SLO_METRICS:
            raise UserError(f"slo: unknown metric {key!r}: expected some of {known}", field="slo")
        if (
            isinstance(bound, bool)
            or not isinstance(bound, (int, float))
            or not math.isfinite(bound)
            or bound <= 0
        ):
            raise UserError(f"slo: {key}={bound!r} is invalid: expected a number of ms > 0", field="slo")
        slo[key] = float(bound)
    return slo


def _check_endpoint(url: Any) -> None:
    if not isinstance(url, str) or not _ENDPOINT.match(url):
        raise UserError(
            f"endpoint {url!r} is not an http(s) URL: expected the API's base, e.g. http://127.0.0.1:8000/v1",
            field="endpoint",
        )


def _check_server_metrics(url: Any, endpoint: str | None) -> None:
    if not isinstance(url, str) or not _ENDPOINT.match(url):
        raise UserError(
            f"server_metrics {url!r} is not an http(s) URL: expected the server's Prometheus metrics, "
            "e.g. http://127.0.0.1:8000/metrics",
            field="server_metrics",
        )
    if endpoint is None:
        raise UserError(
            "server_metrics samples the server the requests go to: give --endpoint too (the servers "
            "--compare-served starts expose no Prometheus metrics)",
            field="server_metrics",
        )
