"""A verdict compares like with like (docs/verdicts.md): `mlscope diff`, GET /api/v1/compare/diff, the
dashboard's diff page and `mlscope regressions` / GET /api/v1/history/regressions on a real SQLite
store refuse two runs that measured different workloads, naming each difference, and compare them
with the differences stated when allowed; a configured model reads `hf:gpt2[n_layer=2]` wherever it
is listed. Given / When / Then in each test's comments."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import numpy as np
import pytest
from flask.testing import FlaskClient

from mlscope.cli import render
from mlscope.store import Store, open_store
from tests.contract.builders import COLD_START, T0, make_measurement, make_system
from tests.integration.test_history import noisy
from tests.integration.test_history_cli_api import run

PROBLEM = "application/problem+json"
GPT2 = "hf:gpt2"


@pytest.fixture(autouse=True)
def wide(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables and lines wide enough that none wraps, so a line can be looked for whole."""
    monkeypatch.setattr(render.console, "width", 400)
    monkeypatch.setattr(render.err_console, "width", 400)


@pytest.fixture
def store(mlscope_env: dict[str, str]) -> Iterator[Store]:
    with open_store(mlscope_env["MLSCOPE_STORE_URL"]) as opened:
        yield opened


def stored_gpt2(
    store: Store,
    latencies_ns: np.ndarray,
    *,
    config: dict[str, Any] | None = None,
    generation: dict[str, Any] | None = None,
    manifest_sha256: str = "a" * 64,
) -> str:
    """A succeeded generate evaluation of hf:gpt2, resolved with `config` overrides, with these settings."""
    model_options = {"config": config} if config else {}
    id = store.create_evaluation(
        model={"name": GPT2, "version": "1", "manifest_sha256": manifest_sha256},
        manifest={"name": GPT2, "attributes": {"model_options": model_options} if model_options else {}},
        framework={"name": "pytorch", "version": None},
        runner="inline",
        device="cpu",
        request={
            "model": GPT2,
            "framework": "pytorch",
            "scenarios": ["generate"],
            "batch_sizes": [1],
            "model_options": model_options,
            "generation": generation or {},
        },
    )
    store.start_evaluation(id)
    point = make_measurement("generate", 1, mean=float(np.median(latencies_ns)) / 1e6)
    point["latencies_ns"] = [int(v) for v in latencies_ns]
    point["validity"] = {"valid": True, "reasons": []}
    store.finish_evaluation(
        id,
        system=make_system(1),
        framework={"name": "pytorch", "version": "2.3.0"},
        cold_start=COLD_START,
        measurements=[point],
    )
    return id


def latencies(seed: int, scale: float = 1.0) -> np.ndarray:
    return scale * 5e6 * np.random.default_rng(seed).lognormal(0.0, 0.2, 2000)


@pytest.fixture
def unlike(store: Store) -> tuple[str, str]:
    """A: hf:gpt2 as shipped, 128-token prompts; B: two layers, 512-token prompts, 16 output tokens,
    faster."""
    a = stored_gpt2(store, latencies(1))
    b = stored_gpt2(
        store,
        latencies(2, 0.1),
        config={"n_layer": 2},
        generation={"prompt_tokens": 512, "output_tokens": 16},
        manifest_sha256="b" * 64,
    )
    return a, b


NAMED = (
    "model_options.config.n_layer: unset (A) vs 2 (B)",
    "generation.prompt_tokens: 128 (A) vs 512 (B)",
    "generation.output_tokens: 64 (A) vs 16 (B)",
)


# ----- mlscope diff ---------------------------------------------------------------------------------


def test_diff_refuses_unlike_workloads_in_one_line_naming_each_difference(
    unlike: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    # When B (two layers, longer prompts) is diffed against A
    code, out, err = run(capsys, "diff", *unlike)
    # Then nothing is compared: exit 2, one line naming every difference and the way to compare anyway
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert all(named in err for named in NAMED)
    assert "--allow-different" in err and "faster" not in err


def test_diff_with_allow_different_compares_and_states_the_differences_above_the_table(
    unlike: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    # When the same pair is diffed with --allow-different
    code, out, _ = run(capsys, "diff", *unlike, "--allow-different")
    # Then the verdict comes, under a warning block that lists each difference
    assert code == 0
    warning = out.index("warning: A and B measured different workloads")
    table = out.index("B against A")
    assert warning < table and "faster by" in out[table:]
    assert all(out.index(named) < table for named in NAMED)
    # And each side is named with its overrides
    assert f"A: {unlike[0][:8]} hf:gpt2 on pytorch" in out
    assert f"B: {unlike[1][:8]} hf:gpt2[n_layer=2] on pytorch" in out
    # And as JSON the differences are listed, with each side's display name beside its stored name
    code, out, _ = run(capsys, "diff", *unlike, "--allow-different", "--json")
    report = json.loads(out)
    assert [d["text"] for d in report["differences"]] == list(NAMED)
    assert report["b"]["model"] == GPT2 and report["b"]["display_name"] == "hf:gpt2[n_layer=2]"
    assert report["points"][0]["verdict"] == "faster"


def test_diff_of_one_configuration_compares_as_before(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given two runs of hf:gpt2 with the same override and settings
    same: dict[str, Any] = {
        "config": {"n_layer": 2},
        "generation": {"prompt_tokens": 512},
        "manifest_sha256": "b" * 64,
    }
    a, b = stored_gpt2(store, latencies(3), **same), stored_gpt2(store, latencies(4, 1.2), **same)
    # When diffed
    code, out, _ = run(capsys, "diff", a, b, "--json")
    # Then they are compared with no difference to state, and the table has no warning
    report = json.loads(out)
    assert code == 0 and report["differences"] == [] and report["points"][0]["verdict"] == "slower"
    code, out, _ = run(capsys, "diff", a, b)
    assert code == 0 and "different workloads" not in out and "hf:gpt2[n_layer=2]" in out


def test_results_list_shows_the_display_name(
    unlike: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "results", "list")
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if line.count("│") > 3}
    assert code == 0
    assert "hf:gpt2[n_layer=2]" in rows[unlike[1][:8]]
    assert "hf:gpt2 " in rows[unlike[0][:8]] and "[" not in rows[unlike[0][:8]]


# ----- GET /api/v1/compare/diff and the dashboard ------------------------------------------------------


def test_the_api_refuses_unlike_workloads_with_a_422_naming_each_field(
    unlike: tuple[str, str], http: FlaskClient
) -> None:
    answer = http.get("/api/v1/compare/diff", query_string={"a": unlike[0], "b": unlike[1]})
    assert answer.status_code == 422 and answer.mimetype == PROBLEM
    problem = answer.get_json()
    assert sorted(problem["errors"]) == [
        "generation.output_tokens",
        "generation.prompt_tokens",
        "model_options.config.n_layer",
    ]
    assert problem["errors"]["model_options.config.n_layer"] == [NAMED[0]]
    assert [d["field"] for d in problem["differences"]] == [
        "model_options.config.n_layer",
        "generation.prompt_tokens",
        "generation.output_tokens",
    ]


def test_the_api_with_allow_different_answers_the_report_with_the_differences(
    unlike: tuple[str, str], http: FlaskClient
) -> None:
    query = {"a": unlike[0], "b": unlike[1], "allow_different": "true"}
    answer = http.get("/api/v1/compare/diff", query_string=query)
    assert answer.status_code == 200
    report = answer.get_json()
    assert [d["text"] for d in report["differences"]] == list(NAMED)
    assert report["b"]["display_name"] == "hf:gpt2[n_layer=2]"
    # And the OpenAPI document describes the parameter and the field
    spec = http.get("/api/openapi.json").get_json()
    parameters = [p["name"] for p in spec["paths"]["/api/v1/compare/diff"]["get"]["parameters"]]
    assert "allow_different" in parameters
    assert "differences" in json.dumps(spec["components"]["schemas"]["Diff"])


def test_the_dashboard_refuses_with_the_differences_and_a_link_to_compare_anyway(
    unlike: tuple[str, str], http: FlaskClient
) -> None:
    refused = http.get("/diff", query_string={"a": unlike[0], "b": unlike[1]})
    assert refused.status_code == 400
    page = refused.get_data(as_text=True)
    assert "Not compared: A and B measured different workloads" in page
    assert all(named in page for named in NAMED)
    assert 'id="compare-anyway"' in page and "allow_different=true" in page
    allowed = http.get("/diff", query_string={"a": unlike[0], "b": unlike[1], "allow_different": "true"})
    assert allowed.status_code == 200
    page = allowed.get_data(as_text=True)
    notice, table = page.index('id="workload-differences"'), page.index('class="diff-points"')
    assert notice < table and all(named in page for named in NAMED)
    assert "hf:gpt2[n_layer=2]" in page


# ----- mlscope regressions -------------------------------------------------------------------------------


STEP_AT = 12
SINCE = (T0 + timedelta(hours=STEP_AT - 2)).isoformat()


def stored_run(store: Store, median: float, hour: int, threads: int) -> str:
    """A single_stream run of resnet18 at `threads` intra-op threads, `hour` hours after T0."""
    id = store.create_evaluation(
        model={"name": "resnet18", "version": "1", "manifest_sha256": "ab" * 32},
        manifest={"name": "resnet18"},
        framework={"name": "onnxruntime", "version": None},
        runner="inline",
        device="cpu",
        request={"model": "resnet18", "framework": "onnxruntime", "options": {"threads": threads}},
        created_at=T0 + timedelta(hours=hour),
    )
    point = make_measurement(mean=median)
    point["validity"] = {"valid": True, "reasons": []}
    store.finish_evaluation(
        id,
        system=make_system(1),
        framework={"name": "onnxruntime", "version": "1.17.0"},
        cold_start=COLD_START,
        measurements=[point],
    )
    return id


@pytest.fixture
def rethreaded(store: Store) -> None:
    """12 runs around 10 ms at 4 threads, then 10 around 10.6 ms (+6%) at 1 thread: one series (its key
    holds no predictor options), whose step is a settings change, not a slowdown."""
    medians = np.concatenate([noisy(10.0, STEP_AT, 1, 0.01), noisy(10.6, 10, 2, 0.01)])
    for hour, median in enumerate(medians):
        stored_run(store, float(median), hour, 4 if hour < STEP_AT else 1)


def test_regressions_refuses_a_rise_between_unlike_workloads_and_counts_it_when_allowed(
    rethreaded: None, capsys: pytest.CaptureFixture[str], http: FlaskClient
) -> None:
    # When regressions are asked for since before the step
    code, out, err = run(capsys, "regressions", "--since", SINCE)
    # Then none is counted (exit 0), and the rise is named as not counted, with its difference
    assert code == 0 and "no regression since" in out
    assert "not counted: the runs before and after measured different workloads" in err
    assert "options.threads: 4 (before) vs 1 (now)" in err and "--allow-different" in err
    # And with --allow-different it is a regression (exit 1), its difference warned about
    code, out, err = run(capsys, "regressions", "--since", SINCE, "--allow-different")
    assert code == 1 and "1 regression(s)" in out
    assert "different workloads, compared as asked: options.threads: 4 (before) vs 1 (now)" in err
    # And the API answers the same, the refused rise apart
    found = http.get("/api/v1/history/regressions", query_string={"since": SINCE}).get_json()
    assert found["regressions"] == []
    [refused] = found["refused"]
    assert [d["field"] for d in refused["differences"]] == ["options.threads"]
    allowed = http.get(
        "/api/v1/history/regressions", query_string={"since": SINCE, "allow_different": "true"}
    ).get_json()
    assert [r["differences"][0]["text"] for r in allowed["regressions"]] == [
        "options.threads: 4 (before) vs 1 (now)"
    ]
    assert allowed["refused"] == []
