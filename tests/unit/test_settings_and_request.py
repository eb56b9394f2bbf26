"""Settings (file, then environment on top) and the evaluation request contract."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlscope.contract.errors import UserError
from mlscope.contract.request import EvaluationRequest, parse_request
from mlscope.contract.settings import load_settings


def test_the_environment_wins_over_the_settings_file(tmp_path: Path) -> None:
    # Given a settings file naming one store and cache, and an environment naming another store
    (tmp_path / "s.toml").write_text('store_url = "sqlite:///from-file.db"\ncache_dir = "/tmp/c"\n')
    env = {
        "MLSCOPE_SETTINGS": str(tmp_path / "s.toml"),
        "MLSCOPE_STORE_URL": "postgresql://db/x",
        "MLSCOPE_MANIFESTS": "/a:/b",
        "MLSCOPE_API_TOKENS": "t1, t2,",
    }
    # When settings are loaded
    settings = load_settings(env)
    # Then the environment's store wins, the file's cache is kept, and lists are split
    assert settings.store_url == "postgresql://db/x"
    assert settings.cache_dir == Path("/tmp/c")
    assert settings.manifests == (Path("/a"), Path("/b"))
    assert settings.api_tokens == ("t1", "t2")


@pytest.mark.parametrize(
    ("file_text", "env", "words"),
    [
        ('stor_url = "sqlite:///x"', {}, "unknown setting 'stor_url'"),
        ("store_url = ", {}, "not valid TOML"),
        ("", {"MLSCOPE_STORE_URL": "mlscope.db"}, "store_url='mlscope.db' is not a URL"),
    ],
)
def test_bad_settings_name_the_setting(
    tmp_path: Path, file_text: str, env: dict[str, str], words: str
) -> None:
    (tmp_path / "s.toml").write_text(file_text)
    with pytest.raises(UserError, match=words):
        load_settings({"MLSCOPE_SETTINGS": str(tmp_path / "s.toml"), **env})


def test_a_minimal_request_gets_the_documented_defaults() -> None:
    request = parse_request({"model": "resnet18", "framework": "pytorch"})
    assert request == EvaluationRequest(model="resnet18", framework="pytorch")
    assert (request.batch_sizes, request.scenarios, request.device, request.runner) == (
        (1,),
        ("single_stream",),
        "cpu",
        "process",
    )


def test_repeated_batch_sizes_and_scenarios_are_measured_once_in_order() -> None:
    request = parse_request(
        {
            "model": "m",
            "framework": "f",
            "batch_sizes": [8, 1, 8],
            "scenarios": ["offline", "single_stream", "offline"],
        }
    )
    assert request.batch_sizes == (8, 1) and request.scenarios == ("offline", "single_stream")


def test_every_bad_field_is_named_in_one_message() -> None:
    # When a request has several mistakes at once
    with pytest.raises(UserError) as raised:
        parse_request(
            {
                "model": "m",
                "batch_sizes": [1, "8"],
                "device": "gpu0",
                "colour": "red",
                "options": {"threads": 0},
            }
        )
    message = str(raised.value)
    # Then each is named with its field, and the first field is given for programs
    for words in (
        "framework: ",
        "batch_sizes.1: ",
        "device: must be cpu, cuda or cuda:N",
        "colour: ",
        "options.threads: ",
    ):
        assert words in message
    assert raised.value.field is not None


def test_every_trace_level_is_accepted_and_an_unknown_one_is_named() -> None:
    for level in ("NO_TRACE", "APPLICATION", "MODEL", "FRAMEWORK", "LIBRARY", "HARDWARE", "FULL"):
        assert parse_request({"model": "m", "framework": "f", "trace_level": level}).trace_level == level
    with pytest.raises(UserError, match="trace_level: must be one of: NO_TRACE, APPLICATION, MODEL"):
        parse_request({"model": "m", "framework": "f", "trace_level": "KERNEL"})
