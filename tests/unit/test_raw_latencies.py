"""Raw latencies: packed compactly and read back exactly, capped honestly, and a result write the
store did not take tried again rather than lost."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from mlscope.contract.errors import StoreUnavailable, UserError
from mlscope.contract.settings import Settings, load_settings
from mlscope.store.records import (
    PLAIN_CODEC,
    RAW_CODEC,
    pack_latencies,
    subsample_latencies,
    unpack_latencies,
)
from mlscope.workers import pipeline


def test_packing_in_the_standard_library_writes_the_bytes_numpy_s_shuffle_did() -> None:
    # Given latencies across the whole int64 range, as a list and as an array
    values = [
        0,
        1,
        -1,
        2**63 - 1,
        -(2**63),
        *np.random.default_rng(1).integers(-(2**63), 2**63 - 1, 1000).tolist(),
    ]
    plain = np.asarray(values, dtype="<i8").tobytes()
    # When packed both ways (the stored rows of every earlier release were written with numpy's shuffle)
    numpy_shuffled = zlib.compress(np.frombuffer(plain, dtype=np.uint8).reshape(-1, 8).T.tobytes(), 6)
    # Then the bytes are the same, and each reads back as the other wrote it
    for given in (values, np.asarray(values, dtype=np.int64)):
        assert pack_latencies(given) == numpy_shuffled
        assert pack_latencies(given, PLAIN_CODEC) == plain
    assert unpack_latencies(numpy_shuffled, RAW_CODEC) == values
    assert unpack_latencies(pack_latencies([]), RAW_CODEC) == []
    # And a value beyond 64 bits is refused, not wrapped
    with pytest.raises(OverflowError):
        pack_latencies([2**63])


def test_packed_latencies_read_back_exactly_and_take_about_a_third_of_the_room() -> None:
    # Given 100k latencies around 10 ms, as a real run records them
    values = np.random.default_rng(0).lognormal(np.log(10e6), 0.05, 100_000).astype(np.int64).tolist()
    # When they are packed and unpacked
    packed = pack_latencies(values)
    # Then nothing changes, and the compressed form is well under the plain int64 bytes
    assert unpack_latencies(packed, RAW_CODEC) == values
    plain = pack_latencies(values, PLAIN_CODEC)
    assert unpack_latencies(plain, PLAIN_CODEC) == values and unpack_latencies(plain, None) == values
    assert len(packed) < 0.5 * len(plain)
    assert unpack_latencies(pack_latencies([]), RAW_CODEC) == []
    with pytest.raises(ValueError, match="unknown latency codec 'lz4'"):
        unpack_latencies(packed, "lz4")


def test_a_cap_keeps_an_evenly_strided_subsample_and_says_so() -> None:
    measurement = {
        "scenario": "single_stream",
        "latency_ms": {"count": 1001},
        "latencies_ns": list(range(1001)),
    }
    capped = subsample_latencies(measurement, 100)
    assert capped["latencies_ns"] == list(range(0, 1001, 11))
    assert capped["latencies_sampled"] == {"kept": 91, "of": 1001, "every": 11}
    assert capped["latency_ms"] == {"count": 1001}  # the summary still covers every sample
    assert subsample_latencies(measurement, 2000) == measurement
    assert subsample_latencies(measurement, 0)["latencies_sampled"] == {"kept": 0, "of": 1001, "every": 1002}
    assert subsample_latencies({"scenario": "offline"}, 10) == {"scenario": "offline"}


def test_the_cap_is_a_setting_with_a_clear_error() -> None:
    assert Settings().max_raw_latencies == 100_000
    assert (
        load_settings(
            {"MLSCOPE_MAX_RAW_LATENCIES": "500", "MLSCOPE_SETTINGS": "/nonexistent"}
        ).max_raw_latencies
        == 500
    )
    with pytest.raises(UserError, match="max_raw_latencies='many': expected a whole number"):
        load_settings({"MLSCOPE_MAX_RAW_LATENCIES": "many", "MLSCOPE_SETTINGS": "/nonexistent"})
    with pytest.raises(UserError, match=r"max_raw_latencies=-1: expected a whole number >= 0"):
        Settings(max_raw_latencies=-1)


def test_a_result_write_is_tried_again_while_the_store_is_unavailable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a store that fails twice, then takes the write (pauses shortened for the test)
    monkeypatch.setattr(pipeline, "RESULT_WRITE_PAUSES_S", (0.0, 0.0, 0.0))
    calls: list[int] = []

    def flaky() -> None:
        calls.append(1)
        if len(calls) <= 2:
            raise StoreUnavailable("the store at sqlite:///x did not take the call (database is locked)")

    # When the result is written
    pipeline.write_result(flaky, "storing the result of e1")
    # Then it was written on the third try
    assert len(calls) == 3

    # Given a store that never comes back: the error propagates after every pause was tried
    calls.clear()

    def down() -> None:
        calls.append(1)
        raise StoreUnavailable("gone")

    with pytest.raises(StoreUnavailable, match="gone"):
        pipeline.write_result(down, "storing the result of e2")
    assert len(calls) == 4

    # ... and any other error is not retried
    calls.clear()

    def broken() -> None:
        calls.append(1)
        raise ValueError("a bug")

    with pytest.raises(ValueError):
        pipeline.write_result(broken, "x")
    assert len(calls) == 1
