"""The generate scenario's settings and how requests ask for it: lengths, SLOs, endpoints, and the
field each mistake is reported under (a request, the CLI with exit code 2, nothing stored)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlscope.cli import main
from mlscope.contract.errors import UserError
from mlscope.contract.generation import (
    GenerationSettings,
    draw_lengths,
    parse_lengths,
    parse_slo,
    read_lengths_file,
)
from mlscope.contract.load import LoadSettings
from mlscope.contract.request import parse_request
from mlscope.store import open_store


def test_lengths_are_fixed_uniform_normal_or_listed_and_drawn_the_same_way_twice() -> None:
    assert draw_lengths(parse_lengths(64, "x"), 3, 0) == [64, 64, 64]
    assert draw_lengths(parse_lengths("64", "x"), 2, 0) == [64, 64]
    uniform = draw_lengths(parse_lengths("uniform:10-20", "x"), 500, 1)
    assert min(uniform) >= 10 and max(uniform) <= 20 and len(set(uniform)) == 11
    assert uniform == draw_lengths("uniform:10-20", 500, 1)
    assert uniform != draw_lengths("uniform:10-20", 500, 2)
    normal = draw_lengths(parse_lengths("normal:100,10", "x"), 2000, 0)
    assert 95 < sum(normal) / len(normal) < 105 and min(normal) >= 1
    assert draw_lengths(parse_lengths([5, 7], "x"), 5, 0) == [5, 7, 5, 7, 5]


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (0, "expected a length in [1, "),
        ("uniform:20-10", "LOW ≤ HIGH"),
        ("poisson:5", "expected a number of tokens (128), uniform:LOW-HIGH"),
        ([3, "x"], "every listed length must be an integer"),
        (True, "expected a number of tokens"),
        ("file:lengths.txt", "a file of lengths is read by the CLI"),
    ],
)
def test_a_bad_length_names_the_setting_and_the_forms(value: object, words: str) -> None:
    with pytest.raises(UserError) as raised:
        parse_lengths(value, "prompt_tokens")
    assert raised.value.field == "prompt_tokens" and words in raised.value.message


def test_a_lengths_file_is_read_where_it_is_typed(tmp_path: Path) -> None:
    path = tmp_path / "lengths.txt"
    path.write_text("# prompt lengths of a trace\n12, 40\n7\n")
    assert read_lengths_file(str(path), "generation.prompt_tokens") == [12, 40, 7]
    path.write_text("12 abc\n")
    with pytest.raises(UserError, match="line 1: 'abc' is not a length"):
        read_lengths_file(str(path), "generation.prompt_tokens")
    with pytest.raises(UserError, match="cannot read the lengths file"):
        read_lengths_file(str(tmp_path / "missing.txt"), "generation.prompt_tokens")


def test_an_slo_parses_from_text_or_a_mapping_and_refuses_what_it_cannot_bound() -> None:
    assert parse_slo("ttft_ms=200, tpot_ms=50") == {"ttft_ms": 200.0, "tpot_ms": 50.0}
    assert parse_slo({"e2e_ms": 1000}) == {"e2e_ms": 1000.0}
    for text, words in (
        ("ttft=200", "unknown metric 'ttft'"),
        ("ttft_ms", "is not METRIC=MS"),
        ("ttft_ms=fast", "'fast' is not a number of ms"),
        ("ttft_ms=-1", "expected a number of ms > 0"),
        ("", "must bound at least one of ttft_ms, tpot_ms, e2e_ms"),
    ):
        with pytest.raises(UserError) as raised:
            parse_slo(text)
        assert raised.value.field == "slo" and words in raised.value.message, text


def test_settings_check_every_value_and_name_unknown_keys() -> None:
    settings = GenerationSettings.from_dict({"prompt_tokens": "uniform:4-8", "slo": "ttft_ms=100"})
    assert settings.slo == {"ttft_ms": 100.0}
    assert GenerationSettings.from_dict(settings.to_dict()) == settings
    for document, field in (
        ({"requests": 0}, "requests"),
        ({"concurrency": 1.5}, "concurrency"),
        ({"endpoint": "localhost:8000"}, "endpoint"),
        ({"api": "responses"}, "api"),
        ({"request_timeout_s": 0}, "request_timeout_s"),
        ({"endpoint": "http://127.0.0.1:9/v1", "compare_served": True}, "compare_served"),
        ({"temperature": 0.7}, "temperature"),
    ):
        with pytest.raises(UserError) as raised:
            GenerationSettings.from_dict(document)
        assert raised.value.field == field, document


def _request(**fields: object) -> dict[str, object]:
    return {"model": "hf:gpt2", "framework": "pytorch", "scenarios": ["generate"], **fields}


def test_a_generate_request_keeps_its_settings_and_may_take_poisson_arrivals() -> None:
    request = parse_request(_request(generation={"slo": "tpot_ms=20", "concurrency": 2}, load={"qps": 3}))
    assert request.generation == {"slo": {"tpot_ms": 20.0}, "concurrency": 2}
    assert request.load == {"qps": 3.0}
    LoadSettings.from_dict(request.load).check_scenarios(list(request.scenarios))


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"scenarios": ["single_stream"], "generation": {"requests": 4}}, "generation", "applies only to"),
        ({"scenarios": ["generate", "offline"]}, "scenarios", "generate runs alone"),
        ({"batch_sizes": [4]}, "batch_sizes", "one sequence per request"),
        ({"load": {"find_max_qps": True}}, "generation.slo", "needs an slo"),
        ({"load": {"max_in_flight": 4}}, "load.max_in_flight", "generation.concurrency"),
        ({"load": {"latency_bound_ms": 50}}, "load.latency_bound_ms", "the generate scenario's bounds"),
        ({"generation": {"endpoint": "http://127.0.0.1:9/v1"}}, "framework", "runs on the 'endpoint'"),
        ({"framework": "endpoint"}, "framework", "needs generation.endpoint"),
        ({"generation": {"slo": "ttft=1"}}, "generation.slo", "unknown metric"),
        ({"generation": {"output_tokens": 0}}, "generation.output_tokens", "expected a length"),
        (
            {"framework": "endpoint", "generation": {"endpoint": "http://h:1/v1", "server_metrics": "h:1"}},
            "generation.server_metrics",
            "is not an http(s) URL",
        ),
        ({"generation": {"server_metrics": "http://h:1/metrics"}}, "generation.server_metrics", "--endpoint"),
        (
            {
                "framework": "endpoint",
                "generation": {"endpoint": "http://h:1/v1", "api": "embeddings", "turns": 2},
            },
            "generation.turns",
            "not api='embeddings'",
        ),
        (
            {
                "framework": "endpoint",
                "generation": {"endpoint": "http://h:1/v1", "api": "rerank", "shared_prefix_tokens": 8},
            },
            "generation.shared_prefix_tokens",
            "not api='rerank'",
        ),
    ],
)
def test_a_bad_generate_request_names_its_field(fields: dict[str, object], field: str, words: str) -> None:
    with pytest.raises(UserError) as raised:
        parse_request(_request(**fields))
    assert raised.value.field == field and words in raised.value.message, raised.value.message


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        (["--slo", "ttft=5"], "generation.slo: slo: unknown metric 'ttft'"),
        (["--prompt-tokens", "file:no-such-file.txt"], "cannot read the lengths file"),
        (["--endpoint", "ftp://host/v1"], "generation.endpoint: endpoint 'ftp://host/v1' is not an http"),
        (["--endpoint", "http://127.0.0.1:9/v1", "-f", "pytorch"], "runs on the 'endpoint' framework"),
        (["-b", "1,2"], "batch_sizes: the generate scenario sends one sequence per request"),
        (["--find-max-qps"], "generation.slo: find_max_qps with the generate scenario needs an slo"),
        (
            ["--endpoint", "http://127.0.0.1:9/v1", "--server-metrics", "ftp://host/metrics"],
            "generation.server_metrics: server_metrics 'ftp://host/metrics' is not an http(s) URL",
        ),
        (["--server-metrics", "http://127.0.0.1:9/metrics"], "server_metrics samples the server"),
        (["--api", "embeddings"], "generation.api: generation setting api='embeddings' measures a served"),
        (
            ["--endpoint", "http://127.0.0.1:9/v1", "--api", "rerank", "--output-tokens", "8"],
            "generation.output_tokens: generation setting output_tokens does not apply to api='rerank'",
        ),
        (
            ["--endpoint", "http://127.0.0.1:9/v1", "--api", "embeddings", "--ignore-eos"],
            "generation.ignore_eos: generation setting ignore_eos does not apply",
        ),
    ],
)
def test_mlscope_run_generate_with_bad_input_exits_2_in_one_line_storing_nothing(
    mlscope_env: dict[str, str], capsys: pytest.CaptureFixture[str], arguments: list[str], named: str
) -> None:
    with pytest.raises(SystemExit) as ended:
        main(["run", "hf:gpt2", "--scenario", "generate", *arguments])
    assert ended.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("mlscope: error: ") and named in err, err
    assert open_store(mlscope_env["MLSCOPE_STORE_URL"]).count_evaluations() == 0
