"""The generate scenario's workloads beyond drawn requests (docs/generate.md, "Replaying a trace",
"Conversations and shared prefixes"): a trace replayed on its arrival times through the load
generator, its shared blocks the same text wherever their id recurs, conversations whose prompts
carry their history, shared prefixes, the workload recorded and compared, and bad trace lines.

The requests go to a real HTTP server speaking the OpenAI protocol (tests/fixtures/mock_endpoint.py),
which keeps every body it was sent: what a server's prefix cache would see is read there.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mlscope.cli import main
from mlscope.contract.errors import UserError
from mlscope.contract.generation import GenerationSettings
from mlscope.contract.load import LoadSettings
from mlscope.contract.request import parse_request
from mlscope.contract.trace import TRACE_BLOCK_TOKENS, read_trace
from mlscope.contract.workload import workload_differences, workload_key
from mlscope.runtime.generate.driver import build_requests, run_generate
from mlscope.runtime.generate.endpoint import EndpointEngine
from mlscope.runtime.measure.load_report import LATENESS_LIMIT_MS
from mlscope.runtime.measure.settings import MeasureSettings
from mlscope.store import open_store
from tests.fixtures.mock_endpoint import MockEndpoint, mock_endpoint

MEASURE = MeasureSettings(min_count=10, max_seconds=5)
NS_PER_MS = 1_000_000


@pytest.fixture
def server() -> Iterator[MockEndpoint]:
    with mock_endpoint() as endpoint:
        yield endpoint


def _write_jsonl(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _user_text(body: dict[str, Any]) -> str:
    return " ".join(m["content"] for m in body["messages"])


# It holds the generator's lateness to its limit: beside the parallel tests' load on two cores it
# measured that load (3.2 ms against its 2 ms limit), so `make test` runs it alone.
@pytest.mark.quiet
def test_a_trace_is_replayed_on_its_arrivals_scaled_by_its_speed_with_the_lateness_recorded(
    server: MockEndpoint, tmp_path: Path
) -> None:
    arrivals = [0, 40, 40, 100, 180, 200, 260, 300, 380, 400, 470, 520]
    lines = [
        {"timestamp": 1000 + t, "input_length": 20 + i, "output_length": 3 + i % 4}
        for i, t in enumerate(arrivals)
    ]
    trace = read_trace(str(_write_jsonl(tmp_path / "mooncake.jsonl", lines)))
    settings = GenerationSettings(trace=trace, trace_speed=2.0, concurrency=8, warmup_requests=0)
    engine = EndpointEngine(server.base_url, "ok")
    measurement = run_generate(engine, settings, LoadSettings(), MEASURE, remote=True)
    generation, load = measurement["generation"], measurement["load"]
    # Every line sent once, its lengths forced
    assert generation["requests"] == len(lines) and generation["failed_requests"]["count"] == 0
    assert generation["per_request"]["output_tokens"] == [line["output_length"] for line in lines]
    assert sorted(b["max_tokens"] for b in server.bodies) == sorted(line["output_length"] for line in lines)
    # Each request was due at its line's time after the first, divided by the speed
    due = [d * NS_PER_MS / 2.0 for d in arrivals]
    assert load["intended_span_s"] == pytest.approx(due[-1] / 1e9)
    assert load["scheduled_qps"] == pytest.approx((len(lines) - 1) / (due[-1] / 1e9))
    # ... and was sent then: the generator's own lateness and the start's, recorded, within its limit
    assert load["issue_lateness_ms"]["p50"] <= LATENESS_LIMIT_MS
    assert load["queue_wait_ms"]["median"] <= LATENESS_LIMIT_MS
    assert load["achieved_span_s"] == pytest.approx(load["intended_span_s"], abs=0.05)
    assert load["trace"] == {
        "name": "mooncake.jsonl",
        "sha256": trace["sha256"],
        "lines": len(lines),
        "speed": 2.0,
    }
    assert generation["workload"] == {"trace": load["trace"]}


def test_requests_sharing_a_hash_id_share_that_block_of_their_prompt_and_no_other(
    server: MockEndpoint, tmp_path: Path
) -> None:
    block = TRACE_BLOCK_TOKENS
    lines: list[dict[str, Any]] = [
        {"timestamp": 0, "input_length": 2 * block + 10, "output_length": 2, "hash_ids": [7, 8, 9]},
        {"timestamp": 5, "input_length": 2 * block + 11, "output_length": 2, "hash_ids": [7, 8, 11]},
        {"timestamp": 10, "input_length": block + 30, "output_length": 2, "hash_ids": [7, 12]},
        {"timestamp": 15, "input_length": block + 31, "output_length": 2, "hash_ids": [5]},
        {"timestamp": 20, "input_length": block // 2, "output_length": 2},
    ]
    trace = read_trace(str(_write_jsonl(tmp_path / "shared.jsonl", lines)))
    settings = GenerationSettings(trace=trace, concurrency=4, warmup_requests=0)
    run_generate(EndpointEngine(server.base_url, "ok"), settings, LoadSettings(seed=3), MEASURE, remote=True)
    # Each line's prompt, known by its length (all differ)
    words = [_user_text(body).split() for body in server.bodies]
    prompts = {i: next(w for w in words if len(w) == line["input_length"]) for i, line in enumerate(lines)}
    # Each prompt is its input length in words (the word list's words are a token each)
    assert sorted(len(w) for w in words) == sorted(line["input_length"] for line in lines)

    def blocks(i: int) -> list[list[str]]:
        return [prompts[i][k : k + block] for k in range(0, len(prompts[i]), block)]

    # Block id 7 starts three prompts with the same text, 8 continues two of them ...
    assert blocks(0)[0] == blocks(1)[0] == blocks(2)[0]
    assert blocks(0)[1] == blocks(1)[1]
    # ... and different ids are different text, also a third block of each id's own
    assert blocks(0)[2] != blocks(1)[2][:10] and blocks(2)[1] != blocks(0)[1][:30]
    assert blocks(3)[0] != blocks(0)[0]
    # The same seed makes the same prompts again; another seed other ones
    again = build_requests(settings, 0, 3, None)
    assert [r.parts for r in again] == [r.parts for r in build_requests(settings, 0, 3, None)]
    assert [r.parts for r in build_requests(settings, 0, 4, None)] != [r.parts for r in again]


def test_an_azure_csv_trace_reads_its_datetimes_as_arrivals(tmp_path: Path) -> None:
    path = tmp_path / "azure_conv.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.9951690,396,109\n"
        "2023-11-16 18:15:51.0000000,879,20\n"
    )
    trace = read_trace(str(path))
    assert trace["arrivals_ms"] == pytest.approx([0.0, 4314.579, 4319.41])
    assert trace["input_tokens"] == [374, 396, 879] and trace["output_tokens"] == [44, 109, 20]
    assert trace["lines"] == 3 and trace["first_line"] == 2 and "hash_ids" not in trace


def test_each_turn_of_a_conversation_carries_the_turns_before_it(server: MockEndpoint) -> None:
    settings = GenerationSettings(
        turns=3,
        think_time_ms=5,
        requests=6,
        prompt_tokens=12,
        output_tokens=4,
        concurrency=1,
        warmup_requests=0,
    )
    measurement = run_generate(EndpointEngine(server.base_url, "ok"), settings, LoadSettings(), MEASURE)
    generation = measurement["generation"]
    turns = generation["per_request"]["turn"]
    assert turns[:6] == [1, 2, 3, 1, 2, 3]
    bodies = server.bodies
    # Turn 1 is one user message; turn k has the k − 1 turns before it and their answers, as sent
    for conversation in (bodies[0:3], bodies[3:6]):
        first, second, third = (body["messages"] for body in conversation)
        assert [m["role"] for m in third] == ["user", "assistant", "user", "assistant", "user"]
        assert second[:1] == first and third[:3] == second
        assert len(first[0]["content"].split()) == 12 and len(third[1]["content"].split()) == 4
    # Two conversations, two different histories
    assert bodies[0]["messages"] != bodies[3]["messages"]
    # The endpoint saw the prompt grow by a turn and its answer each turn
    sizes = [len(_user_text(body).split()) for body in bodies[:3]]
    assert sizes == [12, 12 + 4 + 12, 2 * (12 + 4) + 12]
    by_turn = generation["turns"]
    assert by_turn["first_ttft_ms"]["count"] == turns.count(1)
    assert by_turn["later_ttft_ms"]["count"] == len(turns) - turns.count(1)
    assert set(by_turn["ttft_median_ms"]) == {"1", "2", "3"}
    assert generation["workload"] == {"sessions": {"turns": 3, "think_time_ms": 5.0}}


def test_prompts_start_with_one_of_the_groups_shared_prefixes(server: MockEndpoint) -> None:
    settings = GenerationSettings(
        shared_prefix_tokens=40,
        prefix_groups=3,
        requests=10,
        prompt_tokens=8,
        output_tokens=2,
        warmup_requests=0,
    )
    run_generate(EndpointEngine(server.base_url, "ok"), settings, LoadSettings(), MEASURE)
    words = [_user_text(body).split() for body in server.bodies[:9]]
    assert all(len(w) == 48 for w in words)
    prefixes = [" ".join(w[:40]) for w in words]
    # Request i has prefix i mod 3; the rest of each prompt is its own
    assert prefixes[0] == prefixes[3] == prefixes[6] and prefixes[1] == prefixes[4]
    assert len(set(prefixes)) == 3
    assert len({" ".join(w[40:]) for w in words}) == 9


def test_the_workload_ran_is_what_two_results_are_compared_on() -> None:
    def evaluation(generation: dict[str, Any]) -> dict[str, Any]:
        return {
            "model": {"name": "m"},
            "request": {"scenarios": ["generate"], "generation": generation},
            "measurements": [{"scenario": "generate"}],
        }

    trace = {"name": "a.jsonl", "sha256": "0" * 64, "lines": 3, "arrivals_ms": [0, 1, 2]}
    other = {**trace, "sha256": "1" * 64}
    [difference] = workload_differences(evaluation({"trace": trace}), evaluation({"trace": other}))
    # A trace is named by its file, not its data
    assert difference.field == "generation.trace" and "arrivals_ms" not in difference.text
    assert difference.a == {"name": "a.jsonl", "sha256": "0" * 64, "lines": 3}
    keys = {
        workload_key(evaluation(generation), "generate")
        for generation in (
            {"trace": trace},
            {"trace": other},
            {"trace": trace, "trace_speed": 2.0},
            {"turns": 4},
            {"turns": 4, "think_time_ms": 100},
            {"shared_prefix_tokens": 256},
            {"shared_prefix_tokens": 256, "prefix_groups": 4},
            {},
        )
    }
    assert len(keys) == 8
    assert workload_key(evaluation({"trace": {**trace, "arrivals_ms": [0, 5, 9]}}), "generate") in keys


@pytest.mark.parametrize(
    ("name", "text", "named"),
    [
        ("t.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 2}\n{"timestamp": 9, '
         '"output_length": 2}\n', "t.jsonl line 2: missing field 'input_length'"),
        ("t.jsonl", '{"timestamp": 10, "input_length": 5, "output_length": 2}\n{"timestamp": 9, '
         '"input_length": 5, "output_length": 2}\n', "t.jsonl line 2: timestamp goes back in time"),
        ("t.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 2}\nnot json\n',
         "t.jsonl line 2: not a JSON object"),
        ("t.jsonl", '{"timestamp": 0, "input_length": 0, "output_length": 2}\n',
         "t.jsonl line 1: input_length must be an integer"),
        ("t.jsonl", '{"timestamp": 0, "input_length": 600, "output_length": 2, "hash_ids": [1, 2, 3]}\n',
         "t.jsonl line 1: hash_ids names 3 blocks of 512 tokens, more than input_length 600 holds"),
        ("t.csv", "when,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,3,4\n",
         "t.csv line 1: missing column 'TIMESTAMP'"),
        ("t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,3,4\nyesterday,3,4\n",
         "t.csv line 3: TIMESTAMP 'yesterday' is not a date-time"),
        ("t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,3\n",
         "t.csv line 2: 2 fields where the header has 3"),
        ("t.csv", b"\xff\xfe\x00binary", "t.csv: not UTF-8 text"),
    ],
)  # fmt: skip
def test_a_bad_trace_line_exits_2_in_one_line_naming_line_and_field_storing_nothing(
    mlscope_env: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    name: str,
    text: str | bytes,
    named: str,
) -> None:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    with pytest.raises(SystemExit) as ended:
        main(
            [
                "run",
                "ok",
                "--scenario",
                "generate",
                "--endpoint",
                "http://127.0.0.1:9/v1",
                "--trace",
                str(path),
            ]
        )
    assert ended.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("mlscope: error: trace t.") and named in err, err
    assert open_store(mlscope_env["MLSCOPE_STORE_URL"]).count_evaluations() == 0


def test_a_trace_line_beyond_the_models_context_is_named_before_any_request_is_sent(
    server: MockEndpoint, tmp_path: Path
) -> None:
    lines = [
        {"timestamp": 0, "input_length": 100, "output_length": 8},
        {"timestamp": 5, "input_length": server.max_model_len - 4, "output_length": 8},
    ]
    trace = read_trace(str(_write_jsonl(tmp_path / "long.jsonl", lines)))
    engine = EndpointEngine(server.base_url, "ok")
    with pytest.raises(UserError) as raised:
        run_generate(engine, GenerationSettings(trace=trace, warmup_requests=0), LoadSettings(), MEASURE)
    assert raised.value.field == "generation.trace"
    assert raised.value.message.startswith("trace long.jsonl line 2: input_length")
    assert server.bodies == []


def test_a_trace_line_beyond_the_endpoints_context_exits_2_before_anything_is_stored_or_sent(
    server: MockEndpoint, mlscope_env: dict[str, str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Given an endpoint whose GET /models says a context of 2048 tokens, and a trace whose third
    # line asks for more
    lines = [
        {"timestamp": 0, "input_length": 100, "output_length": 8},
        {"timestamp": 5, "input_length": 200, "output_length": 8},
        {"timestamp": 9, "input_length": server.max_model_len - 4, "output_length": 8},
    ]
    path = _write_jsonl(tmp_path / "long.jsonl", lines)
    with pytest.raises(SystemExit) as ended:
        main(["run", "ok", "--scenario", "generate", "--endpoint", server.base_url, "--trace", str(path)])
    # Then one line names the line and the lengths, exit 2, and nothing was stored or sent
    assert ended.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "mlscope: error: trace long.jsonl line 3: input_length 2044 + output_length 8 exceed the "
        "model's context of 2048 tokens"
    ), err
    assert open_store(mlscope_env["MLSCOPE_STORE_URL"]).count_evaluations() == 0
    assert server.bodies == []


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"generation": {"trace": {"name": "x"}}}, "generation.trace", "missing key"),
        ({"generation": {"trace_speed": 2}}, "generation.trace_speed", "give a trace too"),
        ({"generation": {"turns": 0}}, "generation.turns", "expected an integer"),
        ({"generation": {"think_time_ms": 10}}, "generation.think_time_ms", "give turns > 1"),
        ({"generation": {"prefix_groups": 4}}, "generation.prefix_groups", "give shared_prefix_tokens"),
        ({"generation": {"turns": 2}, "load": {"qps": 3}}, "generation.turns", "run closed-loop"),
    ],
)
def test_a_bad_workload_request_names_its_field(fields: dict[str, Any], field: str, words: str) -> None:
    request = {"model": "hf:gpt2", "framework": "pytorch", "scenarios": ["generate"], **fields}
    with pytest.raises(UserError) as raised:
        parse_request(request)
    assert raised.value.field == field and words in raised.value.message, raised.value.message


def test_a_trace_document_sent_with_a_line_going_back_is_refused_naming_the_line(tmp_path: Path) -> None:
    lines = [{"timestamp": t, "input_length": 5, "output_length": 2} for t in (0, 10, 20)]
    trace = read_trace(str(_write_jsonl(tmp_path / "sent.jsonl", lines)))
    trace["arrivals_ms"][2] = 5.0
    request = {
        "model": "hf:gpt2",
        "framework": "pytorch",
        "scenarios": ["generate"],
        "generation": {"trace": trace},
    }
    with pytest.raises(UserError) as raised:
        parse_request(request)
    assert raised.value.field == "generation.trace"
    assert "sent.jsonl line 3: timestamp goes back in time" in raised.value.message
