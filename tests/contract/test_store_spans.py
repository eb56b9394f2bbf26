"""The Store contract, part 4: spans. Saving checks every span first and is idempotent per
(evaluation, span id); reads come back ordered by (start_ns, span_id); a trace of 200k spans is saved
in one call; the layer breakdown groups, totals and shares exactly as records.layer_rows says, on
every backend (the Mongo store computes it with an aggregation pipeline of its own)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from mlscope.contract.errors import UserError
from mlscope.store import EvaluationNotFound, Store
from mlscope.store.records import LayerTotal, layer_rows
from tests.contract.builders import RESULT_KEYS, run_to

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def span(n: int, **overrides: Any) -> dict[str, Any]:
    """Span number n (n ≥ 1): a FRAMEWORK-level layer starting at n µs, lasting n % 7 + 1 µs."""
    return {
        "trace_id": TRACE,
        "span_id": f"{n:016x}",
        "parent_id": None,
        "name": f"layer{n % 5}",
        "level": "FRAMEWORK",
        "start_ns": n * 1000,
        "end_ns": n * 1000 + (n % 7 + 1) * 1000,
        "attributes": {"layer_type": "Conv" if n % 2 else "Relu", "index": n},
        **overrides,
    }


def test_saved_spans_come_back_ordered_by_start_then_span_id(store: Store) -> None:
    # Given an evaluation, and spans given out of order, two of them starting at the same instant
    id = run_to(store, "running")
    spans = [span(3), span(1, parent_id=f"{3:016x}"), span(2, start_ns=3000, end_ns=3500), span(4)]

    # When they are saved
    saved = store.save_spans(id, spans)

    # Then all were new, and they come back sorted, whole, with parent links and attributes
    assert saved == 4
    got = store.get_spans(id)
    assert [s["span_id"] for s in got] == [f"{n:016x}" for n in (1, 2, 3, 4)]
    assert got[0] == span(1, parent_id=f"{3:016x}")
    assert store.count_spans(id) == 4
    assert store.count_spans(id[:8]) == 4


def test_saving_the_same_spans_again_stores_nothing_new(store: Store) -> None:
    # Given spans saved once
    id = run_to(store, "succeeded")
    assert store.save_spans(id, [span(n) for n in range(1, 11)]) == 10

    # When a redelivered job saves them again, some changed, with five new ones
    again = [span(n, name="changed") for n in range(1, 16)]
    saved = store.save_spans(id, again)

    # Then only the five new ones count, and the first version of each span stands
    assert saved == 5
    assert store.count_spans(id) == 15
    names = {s["span_id"]: s["name"] for s in store.get_spans(id)}
    assert names[f"{1:016x}"] == "layer1" and names[f"{15:016x}"] == "changed"
    assert store.save_spans(id, again) == 0
    assert store.save_spans(id, []) == 0


def test_a_span_id_repeated_in_one_call_is_stored_once(store: Store) -> None:
    id = run_to(store, "running")
    assert store.save_spans(id, [span(1), span(1, name="second"), span(2)]) == 2
    assert [s["name"] for s in store.get_spans(id)] == ["layer1", "layer2"]


def test_span_ids_are_unique_per_evaluation_only(store: Store) -> None:
    # Given two evaluations, When the same span ids are saved for each
    first, second = run_to(store, "running"), run_to(store, "running")
    assert store.save_spans(first, [span(1), span(2)]) == 2
    assert store.save_spans(second, [span(1), span(2), span(3)]) == 3

    # Then each keeps its own, and reading one never shows the other's
    assert store.count_spans(first) == 2 and store.count_spans(second) == 3
    assert len(store.get_spans(first)) == 2


def test_level_limit_and_offset_select_spans(store: Store) -> None:
    # Given spans at three levels
    id = run_to(store, "running")
    levels = ["APPLICATION", "MODEL", "FRAMEWORK", "FRAMEWORK", "LIBRARY", "FRAMEWORK"]
    store.save_spans(id, [span(n, level=level) for n, level in enumerate(levels, start=1)])

    # When read by level, and page by page
    framework = store.get_spans(id, level="FRAMEWORK")
    pages = [store.get_spans(id, limit=4, offset=offset) for offset in (0, 4, 8)]

    # Then the level selects, and the pages split the ordered spans without gaps or repeats
    assert [s["span_id"] for s in framework] == [f"{n:016x}" for n in (3, 4, 6)]
    assert [len(page) for page in pages] == [4, 2, 0]
    assert [s["span_id"] for page in pages for s in page] == [f"{n:016x}" for n in range(1, 7)]
    assert store.get_spans(id, level="HARDWARE") == []


def test_spans_are_not_part_of_the_evaluation(store: Store) -> None:
    # Given a finished evaluation with spans
    id = run_to(store, "succeeded")
    before = store.get_evaluation(id)
    store.save_spans(id, [span(1)])

    # When it is read, Then its shape and content are what they were
    after = store.get_evaluation(id)
    assert set(after) == RESULT_KEYS and after == before


def test_attribute_keys_and_values_round_trip(store: Store) -> None:
    # Given attributes with keys document stores treat specially, nesting and large integers
    id = run_to(store, "running")
    attributes = {
        "layer_type": "Conv",
        "input.shape": [1, 3, 224, 224],
        "$op": "aten::conv2d",
        "50%": {"a.b": {"%2E": "literal"}},
        "flops": 2**62,
        "ratio": 0.5,
        "empty": {},
        "none": None,
        "ok": True,
    }
    store.save_spans(id, [span(1, attributes=attributes), span(2, attributes={})])

    # When read, Then they are exactly as given
    got = store.get_spans(id)
    assert got[0]["attributes"] == attributes
    assert got[1]["attributes"] == {}


def test_parent_id_and_attributes_may_be_left_out(store: Store) -> None:
    id = run_to(store, "running")
    given = {key: value for key, value in span(1).items() if key not in ("parent_id", "attributes")}
    store.save_spans(id, [given])
    assert store.get_spans(id) == [{**given, "parent_id": None, "attributes": {}}]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"trace_id": "4BF92F3577B34DA6A3CE929D0E0E4736"}, "spans.1.trace_id"),
        ({"trace_id": "0" * 32}, "spans.1.trace_id"),
        ({"trace_id": TRACE[:-1]}, "spans.1.trace_id"),
        ({"span_id": "xyz"}, "spans.1.span_id"),
        ({"span_id": None}, "spans.1.span_id"),
        ({"parent_id": "1" * 17}, "spans.1.parent_id"),
        ({"name": ""}, "spans.1.name"),
        ({"level": "NO_TRACE"}, "spans.1.level"),
        ({"level": "framework"}, "spans.1.level"),
        ({"start_ns": 1.5}, "spans.1.start_ns"),
        ({"start_ns": True}, "spans.1.start_ns"),
        ({"end_ns": 2**63}, "spans.1.end_ns"),
        ({"start_ns": 5000, "end_ns": 4999}, "spans.1.end_ns"),
        ({"attributes": ["a"]}, "spans.1.attributes"),
        ({"attributes": {"layer_type": 3}}, "spans.1.attributes.layer_type"),
        ({"attributes": {"f": object()}}, "spans.1.attributes.f"),
        ({"duration": 5}, "spans.1.duration"),
    ],
)
def test_an_invalid_span_names_its_field_and_nothing_is_stored(
    store: Store, change: dict[str, Any], field: str
) -> None:
    # Given an evaluation, When spans are saved with one invalid field in the second span
    id = run_to(store, "running")
    with pytest.raises(UserError) as raised:
        store.save_spans(id, [span(1), span(2, **change), span(3)])

    # Then the error names it, and not even the valid first span was stored
    assert raised.value.field == field
    assert store.count_spans(id) == 0


@pytest.mark.parametrize("spans", ["not a list", {"span_id": "1"}, None, [["a"]]])
def test_spans_must_be_a_list_of_objects(store: Store, spans: Any) -> None:
    id = run_to(store, "running")
    with pytest.raises(UserError) as raised:
        store.save_spans(id, spans)
    assert raised.value.field in ("spans", "spans.0")


def test_spans_of_an_unknown_evaluation_are_refused(store: Store) -> None:
    id = run_to(store, "running")
    with pytest.raises(EvaluationNotFound):
        store.save_spans("f" * 32, [span(1)])
    # a prefix is not enough to write: writers hold the full id
    with pytest.raises(EvaluationNotFound):
        store.save_spans(id[:8], [span(1)])
    for read in (store.get_spans, store.count_spans, store.layer_breakdown):
        with pytest.raises(EvaluationNotFound):
            read("f" * 32)


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"level": "NO_TRACE"}, "level"),
        ({"limit": 0}, "limit"),
        ({"limit": "10"}, "limit"),
        ({"offset": -1}, "offset"),
    ],
)
def test_bad_span_reads_name_the_argument(store: Store, arguments: dict[str, Any], field: str) -> None:
    id = run_to(store, "running")
    with pytest.raises(UserError) as raised:
        store.get_spans(id, **arguments)
    assert raised.value.field == field


def test_a_trace_of_200k_spans_is_saved_in_one_call(store: Store) -> None:
    # Given an evaluation and 200k spans in random order: many batches, and more than one message
    id = run_to(store, "running")
    count = 200_000

    def numbered(n: int) -> dict[str, Any]:
        level = "LIBRARY" if n % 1000 else "MODEL"
        return {
            "trace_id": TRACE,
            "span_id": f"{n:016x}",
            "name": "k",
            "level": level,
            "start_ns": n,
            "end_ns": n,
        }

    spans = [numbered(n) for n in range(1, count + 1)]
    random.Random(3).shuffle(spans)

    # When they are saved in one call, then a slice of them again with 1000 new ones
    saved = store.save_spans(id, spans)
    resaved = store.save_spans(id, spans[:20_000] + [numbered(n) for n in range(count + 1, count + 1001)])

    # Then every span was stored once, and they read back in order, the last of them included
    assert (saved, resaved) == (count, 1000)
    assert store.count_spans(id) == count + 1000
    model = store.get_spans(id, level="MODEL", offset=count // 1000 - 2)
    assert [s["span_id"] for s in model] == [f"{n:016x}" for n in (count - 1000, count, count + 1000)]


# ----- the layer breakdown -----------------------------------------------------------------------------


def breakdown_spans() -> list[dict[str, Any]]:
    """Two inferences (MODEL spans of 10 and 20 µs), each with FRAMEWORK layers, some without a type."""
    spans = [
        span(100, name="inference", level="MODEL", start_ns=0, end_ns=10_000, attributes={}),
        span(200, name="inference", level="MODEL", start_ns=20_000, end_ns=40_000, attributes={}),
    ]
    layers = [
        ("conv1", "Conv", 0, 3000),
        ("relu1", "Relu", 3000, 4000),
        ("conv2", "Conv", 4000, 8000),
        ("conv1", "Conv", 20_000, 25_000),
        ("relu1", "Relu", 25_000, 27_000),
        ("conv2", "Conv", 27_000, 35_000),
        ("softmax", None, 35_000, 36_000),
    ]
    for n, (name, layer_type, start, end) in enumerate(layers, start=1):
        attributes = {} if layer_type is None else {"layer_type": layer_type}
        spans.append(span(n, name=name, start_ns=start, end_ns=end, attributes=attributes))
    spans.append(span(50, name="gemm_kernel", level="LIBRARY", start_ns=0, end_ns=2500, attributes={}))
    return spans


def test_the_breakdown_by_name_totals_calls_and_shares_of_model_time(store: Store) -> None:
    # Given an evaluation's spans at three levels
    id = run_to(store, "succeeded")
    store.save_spans(id, breakdown_spans())

    # When its FRAMEWORK level is broken down by span name
    rows = store.layer_breakdown(id)

    # Then each name has its calls and times, largest first, shares of the 30 µs of MODEL time
    assert rows == [
        {"key": "conv2", "calls": 2, "total_ms": 0.012, "mean_ms": 0.006, "share": 0.4},
        {"key": "conv1", "calls": 2, "total_ms": 0.008, "mean_ms": 0.004, "share": pytest.approx(8 / 30)},
        {"key": "relu1", "calls": 2, "total_ms": 0.003, "mean_ms": 0.0015, "share": 0.1},
        {"key": "softmax", "calls": 1, "total_ms": 0.001, "mean_ms": 0.001, "share": pytest.approx(1 / 30)},
    ]


def test_the_breakdown_by_layer_type_falls_back_to_the_name(store: Store) -> None:
    id = run_to(store, "succeeded")
    store.save_spans(id, breakdown_spans())
    rows = store.layer_breakdown(id[:8], group_by="layer_type")
    assert [(r["key"], r["calls"], r["total_ms"]) for r in rows] == [
        ("Conv", 4, 0.020),
        ("Relu", 2, 0.003),
        ("softmax", 1, 0.001),
    ]


def test_without_model_spans_the_share_is_of_the_rows_own_total(store: Store) -> None:
    # Given LIBRARY spans only, two of them tied in total
    id = run_to(store, "succeeded")
    store.save_spans(
        id,
        [
            span(1, name="b_kernel", level="LIBRARY", start_ns=0, end_ns=1000),
            span(2, name="a_kernel", level="LIBRARY", start_ns=1000, end_ns=2000),
            span(3, name="c_kernel", level="LIBRARY", start_ns=2000, end_ns=4000),
        ],
    )
    # When broken down at that level, Then shares sum to one and a tie is ordered by key
    rows = store.layer_breakdown(id, level="LIBRARY")
    assert [(r["key"], r["share"]) for r in rows] == [
        ("c_kernel", 0.5),
        ("a_kernel", 0.25),
        ("b_kernel", 0.25),
    ]
    assert store.layer_breakdown(id, level="HARDWARE") == []


def test_the_breakdown_equals_layer_rows_over_the_stored_spans(store: Store) -> None:
    # Given 3000 random spans over two levels, with and without layer types
    rng = random.Random(11)
    id = run_to(store, "succeeded")
    spans = []
    for n in range(1, 3001):
        start = rng.randrange(0, 10**9)
        level = "MODEL" if n % 100 == 0 else "FRAMEWORK"
        attributes = {"layer_type": rng.choice(["Conv", "Gemm", "Add"])} if rng.random() < 0.7 else {}
        spans.append(
            span(
                n,
                name=f"op{rng.randrange(40)}",
                level=level,
                start_ns=start,
                end_ns=start + rng.randrange(0, 10**7),
                attributes=attributes,
            )
        )
    store.save_spans(id, spans)

    for group_by in ("name", "layer_type"):
        # When broken down, Then the rows equal layer_rows over totals computed here from the spans
        totals: dict[str, list[int]] = {}
        for s in spans:
            if s["level"] != "FRAMEWORK":
                continue
            key = s["name"] if group_by == "name" else s["attributes"].get("layer_type", s["name"])
            calls_and_total = totals.setdefault(key, [0, 0])
            calls_and_total[0] += 1
            calls_and_total[1] += s["end_ns"] - s["start_ns"]
        model_total = sum(s["end_ns"] - s["start_ns"] for s in spans if s["level"] == "MODEL")
        expected = layer_rows([LayerTotal(k, c, t) for k, (c, t) in totals.items()], model_total)
        assert store.layer_breakdown(id, group_by=group_by) == expected


@pytest.mark.parametrize(
    ("arguments", "field"),
    [({"level": "NO_TRACE"}, "level"), ({"level": "GPU"}, "level"), ({"group_by": "kind"}, "group_by")],
)
def test_bad_breakdown_arguments_name_the_field(store: Store, arguments: dict[str, Any], field: str) -> None:
    id = run_to(store, "succeeded")
    with pytest.raises(UserError) as raised:
        store.layer_breakdown(id, **arguments)
    assert raised.value.field == field
