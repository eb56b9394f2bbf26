"""MeasureSettings: documented defaults, self-validation naming the field, and dict round trips."""

from __future__ import annotations

import dataclasses
import math

import pytest

from mlscope.contract.errors import UserError
from mlscope.runtime.measure import MeasureSettings

DOCUMENTED_DEFAULTS = {
    "warmup_count": 10,
    "warmup_seconds": 0.5,
    "warmup_settle": 0.02,
    "min_count": 30,
    "min_seconds": 2.0,
    "max_seconds": 60.0,
    "stability": 0.02,
    "check_every_seconds": 0.25,
    "bootstrap_resamples": 2000,
    "confidence": 0.95,
    "seed": 0,
    "trim": 0.2,
    "concurrency": 1,
    "cv_limit": 0.25,
    "contention_limit": 0.25,
    "max_model_spans": 100_000,
    "trace_warmup": 2,
    "trace_iterations": 5,
    "hardware_seconds": 2.0,
    "hardware_interval_s": 0.1,
}


def test_defaults_are_the_documented_values() -> None:
    # Given no arguments / When settings are built / Then every field has its documented default
    assert MeasureSettings().to_dict() == DOCUMENTED_DEFAULTS


def test_to_dict_then_from_dict_gives_equal_settings() -> None:
    # Given non-default settings
    settings = MeasureSettings(min_count=5, min_seconds=0.1, max_seconds=1.0, concurrency=3, seed=7)
    # When they go through a dict and back
    again = MeasureSettings.from_dict(settings.to_dict())
    # Then nothing is lost
    assert again == settings


def test_from_dict_fills_what_is_left_out_with_defaults() -> None:
    settings = MeasureSettings.from_dict({"min_count": 100})
    assert settings.min_count == 100
    assert settings.max_seconds == DOCUMENTED_DEFAULTS["max_seconds"]


def test_from_dict_rejects_unknown_keys_naming_every_one() -> None:
    # Given a mapping with two misspelt keys
    data = {"min_cout": 5, "bogus": 1, "min_seconds": 1.0}
    # When it is loaded / Then the error names both, and the field is the first of them
    with pytest.raises(UserError) as caught:
        MeasureSettings.from_dict(data)
    assert "bogus" in caught.value.message
    assert "min_cout" in caught.value.message
    assert "min_count" in caught.value.message  # the known names are listed
    assert caught.value.field == "bogus"


def test_from_dict_rejects_a_non_mapping() -> None:
    with pytest.raises(UserError, match="mapping"):
        MeasureSettings.from_dict([("min_count", 3)])


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("warmup_count", -1),
        ("warmup_seconds", -0.1),
        ("min_count", 0),
        ("min_count", "30"),
        ("min_count", True),
        ("min_count", 2.5),
        ("min_seconds", -1),
        ("stability", 0),
        ("stability", 1),
        ("check_every_seconds", 0),
        ("bootstrap_resamples", 5),
        ("confidence", 1.5),
        ("seed", -1),
        ("trim", 0.5),
        ("concurrency", 0),
        ("cv_limit", 0),
        ("contention_limit", 0),
        ("contention_limit", 1.5),
        ("max_seconds", math.nan),
    ],
)
def test_invalid_value_is_refused_naming_the_field_and_what_is_allowed(name: str, value: object) -> None:
    # Given one bad value / When settings are built / Then the error names the field and the range
    with pytest.raises(UserError) as caught:
        MeasureSettings(**{name: value})
    assert caught.value.field == name
    assert name in caught.value.message
    assert "expected" in caught.value.message


def test_max_seconds_below_min_seconds_is_refused() -> None:
    with pytest.raises(UserError) as caught:
        MeasureSettings(min_seconds=5.0, max_seconds=1.0)
    assert caught.value.field == "max_seconds"
    assert "min_seconds" in caught.value.message


def test_integer_seconds_are_stored_as_floats() -> None:
    # Given whole seconds as ints / Then they are floats, so to_dict() is the same either way
    settings = MeasureSettings(min_seconds=1, max_seconds=3)
    assert isinstance(settings.min_seconds, float)
    assert settings.to_dict() == MeasureSettings(min_seconds=1.0, max_seconds=3.0).to_dict()


def test_settings_are_immutable() -> None:
    settings = MeasureSettings()
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.min_count = 3
