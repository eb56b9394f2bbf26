"""A request's `load` settings: validated by the request schema (each bad value named `load.<setting>`),
kept as given, carried into the job; multi_stream's samples per query checked against the input pool
and the dataset at admission; the CLI's load options building the document, and a bad value ending
`mlscope run` in one line with exit code 2 and nothing stored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mlscope.cli import main
from mlscope.cli.options import load_document, request_fields
from mlscope.contract.errors import UserError
from mlscope.contract.job import Job
from mlscope.contract.load import LoadSettings
from mlscope.contract.request import parse_request
from mlscope.runtime.data import DatasetRef
from mlscope.store import open_store
from mlscope.workers.admission import _check_multi_stream

BASE = {"model": "test_tiny_mlp", "framework": "pytorch"}


def refusal(**fields: Any) -> UserError:
    with pytest.raises(UserError) as refused:
        parse_request({**BASE, **fields})
    return refused.value


def test_a_server_request_keeps_the_settings_given_validated() -> None:
    # Given a server request with an integer qps and a seed
    # When it is parsed
    request = parse_request({**BASE, "scenarios": ["server"], "load": {"qps": 20, "seed": 3}})
    # Then only the given settings are kept, qps as a float; LoadSettings reads them back
    assert request.load == {"qps": 20.0, "seed": 3}
    assert isinstance(request.load["qps"], float)
    assert LoadSettings.from_dict(request.load).qps == 20.0
    assert request.to_dict()["load"] == {"qps": 20.0, "seed": 3}


def test_back_to_back_reaches_the_request_from_its_flag_or_load_key() -> None:
    # Given --back-to-back, or --load back_to_back=true (read as JSON), for multi_stream
    for document in (load_document({}, back_to_back=True), load_document({"back_to_back": True})):
        assert document == {"back_to_back": True}
        # When parsed, Then it is kept, and LoadSettings reads it back
        request = parse_request({**BASE, "scenarios": ["multi_stream"], "load": document})
        assert request.load == {"back_to_back": True}
        assert LoadSettings.from_dict(request.load).back_to_back
    # A flag left off says nothing
    assert load_document({}, back_to_back=False) == {}


def test_a_request_without_load_has_an_empty_one() -> None:
    assert parse_request(dict(BASE)).load == {}


@pytest.mark.parametrize(
    ("load", "scenarios", "field", "words"),
    [
        ({"qps": 0}, ["server"], "load.qps", "expected a number in (0, 100000]"),
        ({"qps": 1e9}, ["server"], "load.qps", "expected a number in (0, 100000]"),
        ({"qps": "fast"}, ["server"], "load.qps", "expected a number"),
        ({"latency_bound_ms": 0, "qps": 5}, ["server"], "load.latency_bound_ms", "expected a number > 0"),
        ({"percentile": 100, "qps": 5}, ["server"], "load.percentile", "expected a number in (0, 100)"),
        ({"max_in_flight": 0}, ["multi_stream"], "load.max_in_flight", "an integer in [1, 1024]"),
        ({"burst": 3}, ["server"], "load.burst", "unknown load setting(s) burst"),
        ({}, ["server"], "load.qps", "the server scenario needs a target rate"),
        ({"qps": 5}, ["single_stream"], "load.qps", "qps applies only to the server scenario"),
        ({"find_max_qps": True}, ["server"], "load.latency_bound_ms", "find_max_qps needs latency_bound_ms"),
        (
            {"back_to_back": True, "qps": 5},
            ["server"],
            "load.back_to_back",
            "back_to_back applies only to the multi_stream scenario",
        ),
        ({"back_to_back": "yes"}, ["multi_stream"], "load.back_to_back", "expected true or false"),
        (
            {"back_to_back": True, "interval_ms": 20},
            ["multi_stream"],
            "load.interval_ms",
            "interval_ms=20 does not apply with back_to_back",
        ),
    ],
)
def test_a_bad_load_is_refused_naming_the_setting(
    load: dict[str, Any], scenarios: list[str], field: str, words: str
) -> None:
    # When a request with a bad load document is parsed
    error = refusal(scenarios=scenarios, load=load)
    # Then one line names load.<setting> and what was expected
    assert error.field == field
    assert f"{field}: " in error.message and words in error.message
    assert "\n" not in error.message


def test_the_job_carries_the_requests_load() -> None:
    request = parse_request({**BASE, "scenarios": ["server"], "load": {"qps": 20}})
    job = Job.from_request(request, evaluation_id="e1", manifest={}, origin="here", cache_dir="/tmp")
    assert job.load == {"qps": 20.0}
    # a copy, and it survives the trip through JSON
    assert job.load is not request.load
    assert Job.from_dict(job.to_dict()).load == {"qps": 20.0}


def _multi(load: dict[str, Any], **fields: Any) -> Any:
    return parse_request({**BASE, "scenarios": ["multi_stream"], "load": load, **fields})


def test_multi_stream_needs_an_input_pool_as_large_as_a_query() -> None:
    request = _multi({"samples_per_query": 16}, options={"input_pool": 4})
    with pytest.raises(UserError) as refused:
        _check_multi_stream(request, None)
    assert refused.value.field == "load.samples_per_query"
    assert refused.value.message == (
        "multi_stream's 16 samples per query need 16 distinct inputs, but options.input_pool is 4: "
        "raise input_pool to ≥ 16 (max 64) or lower samples_per_query"
    )
    # An input pool left unset is the runtime's to size: no error
    _check_multi_stream(_multi({"samples_per_query": 16}), None)


def test_multi_stream_refuses_more_samples_per_query_than_any_input_pool() -> None:
    with pytest.raises(UserError) as refused:
        _check_multi_stream(_multi({"samples_per_query": 65}), None)
    assert refused.value.field == "load.samples_per_query"
    assert "at most 64" in refused.value.message


def test_multi_stream_needs_a_dataset_as_large_as_a_query() -> None:
    # Given a dataset limited to 5 samples, before it is resolved (a farm's api) and after
    request = _multi({"samples_per_query": 8}, dataset="digits", limit=5)
    with pytest.raises(UserError) as before:
        _check_multi_stream(request, None)
    assert "larger than the dataset digits (limit 5 samples)" in before.value.message
    small = DatasetRef(name="mine", path="/d", sha256="0" * 64, count=6)
    with pytest.raises(UserError) as after:
        _check_multi_stream(_multi({"samples_per_query": 8}, dataset="/d"), small)
    assert after.value.field == "load.samples_per_query"
    assert "larger than the dataset /d (6 samples)" in after.value.message
    # A large enough one passes
    _check_multi_stream(_multi({"samples_per_query": 8}, dataset="digits", limit=8), None)


def test_the_cli_options_build_only_the_settings_set() -> None:
    # The flags win over --load pairs; unset flags (None, a switch left off) say nothing
    assert load_document({"confidence": 0.95, "qps": 1}, qps=20.0, find_max_qps=False) == {
        "confidence": 0.95,
        "qps": 20.0,
    }
    assert load_document({}, find_max_qps=True, latency_bound_ms=50.0, load_seed=7) == {
        "find_max_qps": True,
        "latency_bound_ms": 50.0,
        "seed": 7,
    }
    common: dict[str, Any] = dict(
        batch_sizes=None,
        scenarios="single_stream",
        device="cpu",
        runner="process",
        trace_level="NO_TRACE",
        threads=None,
        options={},
        min_seconds=None,
        max_seconds=None,
        min_count=None,
        measure={},
        timeout=1800,
        memory_limit=None,
    )
    assert "load" not in request_fields(**common, load={}, qps=None)
    assert request_fields(**common, load={}, qps=5.0)["load"] == {"qps": 5.0}


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        (["--scenario", "server", "--qps", "0"], "load.qps: load setting qps=0.0 is invalid"),
        (["--scenario", "server", "--qps", "1e9"], "load.qps:"),
        (["--scenario", "server", "--qps", "5", "--latency-bound-ms", "0"], "load.latency_bound_ms:"),
        (["--scenario", "server", "--qps", "5", "--percentile", "100"], "load.percentile:"),
        (["--scenario", "server"], "load.qps: the server scenario needs a target rate"),
        (["--qps", "5"], "load.qps: qps applies only to the server scenario"),
        (["--scenario", "server", "--find-max-qps"], "load.latency_bound_ms: find_max_qps needs"),
        (["--scenario", "server", "--load", "burst=2", "--qps", "5"], "load.burst: unknown load setting"),
        (
            ["--scenario", "server", "--qps", "5", "--back-to-back"],
            "load.back_to_back: back_to_back applies only to the multi_stream scenario",
        ),
        (
            ["--scenario", "multi_stream", "--back-to-back", "--interval-ms", "20"],
            "load.interval_ms: interval_ms=20 does not apply with back_to_back",
        ),
        (
            ["--scenario", "multi_stream", "--samples-per-query", "16", "--option", "input_pool=4"],
            "options.input_pool is 4: raise input_pool to ≥ 16",
        ),
    ],
)
def test_mlscope_run_with_a_bad_load_exits_2_in_one_line_storing_nothing(
    mlscope_env: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    arguments: list[str],
    named: str,
) -> None:
    # When `mlscope run` is given a bad load setting
    with pytest.raises(SystemExit) as ended:
        main(["run", "test_tiny_mlp", "-f", "pytorch", *arguments])
    # Then it exits 2 with one line naming the setting, and stored nothing
    assert ended.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("mlscope: error: ") and named in err
    assert open_store(mlscope_env["MLSCOPE_STORE_URL"]).count_evaluations() == 0


def test_the_scenario_help_lists_the_four_scenarios(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        main(["run", "--help"])
    except SystemExit as ended:
        assert ended.code in (0, None)
    out = " ".join(capsys.readouterr().out.split())
    for words in (
        "single_stream (back-to-back latency)",
        "offline (throughput)",
        "server (Poisson arrivals at --qps)",
        "multi_stream (--samples-per-query samples every --interval-ms)",
        "--find-max-qps",
        "--latency-bound-ms",
        "--percentile",
        "--load-seed",
        "--back-to-back",
    ):
        assert words in out
