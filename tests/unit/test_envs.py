"""Framework environments: where they live, what names them, how they are found, and how the process
runner chooses the Python a job runs in. Environments here are fakes (a metadata file beside a link
to this Python), except where pip's failure itself is tested: no framework is installed."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from mlscope.cli import main
from mlscope.contract.errors import UserError
from mlscope.runtime.frameworks import get_framework
from mlscope.workers.envs import (
    METADATA_FILE,
    EnvBuildError,
    PinsFiles,
    create_env,
    env_dir,
    env_for,
    find_pins,
    list_envs,
    pinned_python,
    pins_hash,
    read_env,
    source_checkout,
)
from mlscope.workers.runners.prestart import child_environment
from mlscope.workers.runners.process import ProcessRunner


def write_pins(folder: Path, framework: str = "mxnet", pins: str = "mxnet==1.9.1\n") -> PinsFiles:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{framework}.requirements.txt").write_text(pins)
    (folder / "runtime.requirements.txt").write_text("PyYAML==6.0.3\n")
    return find_pins(framework, folder)


def fake_env(
    directory: Path, framework: str = "mxnet", version: str = "1.9.1", created: str = "2026-01-01"
) -> Path:
    """A finished environment as far as metadata goes; its python is a link to this one."""
    (directory / "bin").mkdir(parents=True)
    python = directory / "bin" / "python"
    python.symlink_to(sys.executable)
    metadata = {
        "framework": framework,
        "version": version,
        "python": str(python),
        "python_version": "3.11.7",
        "pins_hash": directory.name.rpartition("-")[2],
        "created": created,
        "checkout": str(source_checkout()),
    }
    (directory / METADATA_FILE).write_text(json.dumps(metadata))
    return python


def test_an_environment_is_named_by_its_framework_and_the_hash_of_its_pins(tmp_path: Path) -> None:
    # Given pins for MXNet
    pins = write_pins(tmp_path / "pins")
    # Then its folder is <cache>/envs/mxnet-<12 hex digits of the pins' hash>
    directory = env_dir("mxnet", tmp_path / "cache", pins)
    assert directory.parent == tmp_path / "cache" / "envs"
    assert directory.name == f"mxnet-{pins_hash(pins)}" and len(pins_hash(pins)) == 12
    # And a changed pin or another Python makes another name, a reworded comment does not
    before = pins_hash(pins)
    assert pins_hash(pins, "3.10.1") != before
    pins.framework.write_text("# MXNet, exact\nmxnet==1.9.1\n\n")
    assert pins_hash(pins) == before
    pins.framework.write_text("mxnet==1.9.0\n")
    assert pins_hash(pins) != before


def test_pins_are_found_in_the_checkout_and_their_absence_is_a_user_error(tmp_path: Path) -> None:
    # Given this source checkout, Then its MXNet pins are in ops/images
    checkout = source_checkout()
    assert checkout is not None
    assert find_pins("mxnet").framework == checkout / "ops" / "images" / "mxnet.requirements.txt"
    # And an unknown framework, or one without a pins file, is refused by name
    with pytest.raises(UserError, match="unknown framework 'nosuch'"):
        find_pins("nosuch")
    (tmp_path / "runtime.requirements.txt").write_text("")
    with pytest.raises(UserError, match=r"no pins file mxnet\.requirements\.txt"):
        find_pins("mxnet", tmp_path)


def test_only_finished_environments_are_read_and_the_current_pins_choose_one(tmp_path: Path) -> None:
    # Given one environment of the current pins, one of older pins, and one unfinished
    cache = tmp_path / "cache"
    pins = write_pins(tmp_path / "pins")
    current = env_dir("mxnet", cache, pins)
    fake_env(current, version="1.9.1", created="2026-01-01")
    fake_env(cache / "envs" / "mxnet-000000000000", version="1.8.0", created="2026-02-01")
    (cache / "envs" / "mxnet-111111111111" / "bin").mkdir(parents=True)
    # Then the unfinished one is not an environment, and the list is newest first
    assert read_env(cache / "envs" / "mxnet-111111111111") is None
    assert [info.version for info in list_envs(cache)] == ["1.8.0", "1.9.1"]
    # And the framework's environment is the current pins' one, though older
    found = env_for("mxnet", cache, tmp_path / "pins")
    assert found is not None and found.directory == current and found.version == "1.9.1"
    # And without one for the current pins there is none (a stale one is never used)
    pins.framework.write_text("mxnet==1.9.0\n")
    assert env_for("mxnet", cache, tmp_path / "pins") is None


def test_an_environment_whose_python_is_gone_is_not_used(tmp_path: Path) -> None:
    python = fake_env(tmp_path / "mxnet-abc")
    assert read_env(tmp_path / "mxnet-abc") is not None
    python.unlink()
    assert read_env(tmp_path / "mxnet-abc") is None


def test_an_existing_environment_is_reused_without_running_pip(tmp_path: Path) -> None:
    # Given a finished environment of the current pins
    pins = write_pins(tmp_path / "pins")
    fake_env(env_dir("mxnet", tmp_path / "cache", pins))
    lines: list[str] = []
    # When it is created again
    info, made = create_env("mxnet", tmp_path / "cache", log=lines.append, pins_dir=tmp_path / "pins")
    # Then the existing one is returned and nothing was made
    assert made is False and info.version == "1.9.1"
    assert any("exists" in line for line in lines)


def test_a_failing_pip_is_an_env_build_error_with_its_last_lines(tmp_path: Path) -> None:
    # Given pins pip cannot parse (it fails before reaching any index)
    write_pins(tmp_path / "pins", pins="mxnet ==== not a version\n")
    # When the environment is created, Then pip's failure is reported with what it said
    with pytest.raises(EnvBuildError, match="pip install of the pins failed") as failure:
        create_env("mxnet", tmp_path / "cache", pins_dir=tmp_path / "pins")
    assert "Invalid requirement" in failure.value.log or "invalid" in failure.value.log.lower()
    # And no environment is left that could be taken for a finished one
    assert list_envs(tmp_path / "cache") == []


def test_env_create_exits_2_for_an_unknown_framework(capsys: pytest.CaptureFixture[str]) -> None:
    for framework, words in (("nosuch", "unknown framework"),):
        with pytest.raises(SystemExit) as ended:
            main(["env", "create", framework])
        assert ended.value.code == 2
        assert words in capsys.readouterr().err


def test_the_process_runner_runs_a_framework_missing_here_in_its_environment(tmp_path: Path) -> None:
    # Given MXNet, not installed here, with an environment for the current pins; PyTorch installed here
    cache = tmp_path / "cache"
    python = fake_env(env_dir("mxnet", cache))
    runner = ProcessRunner(cache_dir=cache)
    mxnet, pytorch = get_framework("mxnet"), get_framework("pytorch")
    # Then MXNet runs in the environment's Python, at its version, and says where
    assert runner.python_for("mxnet") == str(python)
    assert runner.framework_version(mxnet) == "1.9.1"
    assert runner.where(mxnet) == f"in environment {env_dir('mxnet', cache)}"
    # And PyTorch runs here
    assert runner.python_for("pytorch") == sys.executable and runner.where(pytorch) == "here"
    # And with no environment MXNet cannot run, and the message says where it was looked for
    empty = ProcessRunner(cache_dir=tmp_path / "empty")
    assert empty.framework_version(mxnet) is None
    assert str(tmp_path / "empty" / "envs") in empty.where(mxnet)


def test_a_job_asking_for_threads_starts_its_child_with_omp_num_threads() -> None:
    runner = ProcessRunner()
    asked = runner.key("mxnet", {"threads": 3})
    assert asked.threads == 3 and child_environment(asked.threads)["OMP_NUM_THREADS"] == "3"
    unset = runner.key("mxnet", {})
    assert unset.threads is None
    assert child_environment(unset.threads).get("OMP_NUM_THREADS") == os.environ.get("OMP_NUM_THREADS")


def test_an_environment_of_another_checkout_is_not_this_ones(tmp_path: Path) -> None:
    # Given MXNet's environment for the current pins, but with another checkout's code installed in it
    cache = tmp_path / "cache"
    directory = env_dir("mxnet", cache)
    fake_env(directory)
    metadata = json.loads((directory / METADATA_FILE).read_text())
    (directory / METADATA_FILE).write_text(json.dumps({**metadata, "checkout": str(tmp_path / "elsewhere")}))
    # Then this checkout does not run its jobs there (`mlscope env create` points it here again)
    assert read_env(directory) is not None
    assert env_for("mxnet", cache) is None


def test_pins_may_ask_for_an_older_python(tmp_path: Path) -> None:
    # Caffe2's last runtime has wheels for Python 3.9 only: its pins say so, and the hash follows it.
    (tmp_path / "caffe2.requirements.txt").write_text("# python: 3.9\ntorch==1.10.2\n")
    (tmp_path / "runtime.requirements.txt").write_text("psutil==7.2.2\n")
    pins = find_pins("caffe2", tmp_path)
    assert pinned_python(pins) == "3.9"
    assert pins_hash(pins) == pins_hash(pins, "3.9") != pins_hash(pins, "3.11")
