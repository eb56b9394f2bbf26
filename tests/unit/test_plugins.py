"""The plug-in registries (mlscope.contract.plugins): built-ins from one table per group, which is
also pyproject.toml's entry points, other distributions' entries from installed metadata, each
loaded on first lookup."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import tomllib

from mlscope.api.resources import BUILTIN_RESOURCES
from mlscope.contract.plugins import DuplicatePlugin, Registry, UnknownPlugin
from mlscope.runtime.frameworks import BUILTIN_FRAMEWORKS, FRAMEWORKS, FrameworkSpec
from mlscope.runtime.scenarios import BUILTIN_SCENARIOS
from mlscope.services.bricks.registry import BUILTIN_BRICKS
from mlscope.store import BUILTIN_STORES
from mlscope.workers.runners import BUILTIN_RUNNERS
from tests.conftest import REPO

BUILTINS = {
    "mlscope.frameworks": BUILTIN_FRAMEWORKS,
    "mlscope.stores": BUILTIN_STORES,
    "mlscope.runners": BUILTIN_RUNNERS,
    "mlscope.scenarios": BUILTIN_SCENARIOS,
    "mlscope.bricks": BUILTIN_BRICKS,
    "mlscope.resources": BUILTIN_RESOURCES,
}


@dataclass
class _Dist:
    name: str
    metadata: dict[str, str] = field(init=False)

    def __post_init__(self) -> None:
        self.metadata = {"Name": self.name}


@dataclass
class _Entry:
    """An installed entry point as importlib.metadata gives one: its name, value and distribution."""

    name: str
    value: str
    dist: _Dist


def _installed(monkeypatch: pytest.MonkeyPatch, group: str, *entries: _Entry) -> None:
    class Found:
        def select(self, group: str) -> list[_Entry]:
            return list(entries) if group == wanted else []

    wanted = group
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda: Found())


def test_pyproject_declares_exactly_the_builtin_tables() -> None:
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["entry-points"]
    assert {group: declared.get(group) for group in BUILTINS} == BUILTINS


def test_every_builtin_entry_loads_and_is_what_its_group_holds() -> None:
    assert all(isinstance(FRAMEWORKS[name], FrameworkSpec) for name in BUILTIN_FRAMEWORKS)
    assert [FRAMEWORKS[name].name for name in BUILTIN_FRAMEWORKS] == list(BUILTIN_FRAMEWORKS)
    from mlscope.runtime.scenarios import SCENARIOS
    from mlscope.workers.runners import RUNNERS

    assert all(name == RUNNERS[name].NAME for name in BUILTIN_RUNNERS)
    assert all(name == SCENARIOS[name].NAME for name in BUILTIN_SCENARIOS)


def test_listing_frameworks_imports_no_predictor_and_registers_each_once() -> None:
    # Given a fresh process that imports the framework registry, Then no predictor package is
    # imported until a framework is looked up, and listing them imports their registrations only
    code = (
        "import sys\n"
        "from mlscope.runtime.frameworks import FRAMEWORKS\n"
        "before = [m for m in sys.modules if m.startswith('mlscope.runtime.predictors.')]\n"
        "names = list(FRAMEWORKS)\n"
        "after = [m for m in sys.modules if m.startswith('mlscope.runtime.predictors.')]\n"
        "print(before, len(names) == len(set(names)), sorted(after))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True, timeout=60
    )
    # (the predictors package's __init__ brings its interface, `base`, which imports no framework)
    registrations = [path.rpartition(":")[0] for path in BUILTIN_FRAMEWORKS.values()]
    expected = sorted(["mlscope.runtime.predictors.base", *registrations])
    assert done.stdout.strip() == f"[] True {expected}"


def test_a_distribution_s_entry_is_loaded_on_first_lookup_and_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    _installed(monkeypatch, "test.group", _Entry("extra", "collections:OrderedDict", _Dist("other")))
    registry: Registry[Any] = Registry("test.group", {"own": "collections:Counter"})
    # Then the built-ins come first, then the distribution's, each with where it comes from
    assert list(registry) == ["own", "extra"]
    assert registry.source("extra") == "distribution other" and registry.source("own") == "mlscope (built in)"
    import collections

    assert registry["extra"] is collections.OrderedDict and registry["own"] is collections.Counter


def test_mlscope_s_own_installed_entries_are_its_table_not_duplicates(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given installed metadata of mlscope itself that is older than the code (a name it has since dropped)
    _installed(monkeypatch, "test.group", _Entry("own", "gone:Thing", _Dist("mlscope")))
    registry: Registry[Any] = Registry("test.group", {"own": "collections:Counter"})
    # Then the code's table is what counts
    import collections

    assert list(registry) == ["own"] and registry["own"] is collections.Counter


def test_a_name_declared_twice_is_refused_naming_both(monkeypatch: pytest.MonkeyPatch) -> None:
    _installed(monkeypatch, "test.group", _Entry("own", "elsewhere:Thing", _Dist("intruder")))
    registry: Registry[Any] = Registry("test.group", {"own": "collections:Counter"})
    with pytest.raises(DuplicatePlugin) as refused:
        registry["own"]
    message = str(refused.value)
    assert "'own'" in message and "mlscope (built in)" in message and "distribution intruder" in message
    assert "collections:Counter" in message and "elsewhere:Thing" in message


def test_an_unknown_name_is_reported_with_the_known_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    _installed(monkeypatch, "test.group")
    registry: Registry[Any] = Registry("test.group", {"b": "collections:Counter", "a": "collections:deque"})
    with pytest.raises(UnknownPlugin, match=r"test.group has no 'c'; known: a, b"):
        registry["c"]
    assert "c" not in registry and registry.get("c") is None


def test_an_entry_of_the_wrong_kind_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    _installed(monkeypatch, "test.group", _Entry("odd", "collections:Counter", _Dist("other")))
    registry: Registry[Any] = Registry("test.group", {}, kind=FrameworkSpec)
    with pytest.raises(TypeError, match=r"'odd' from distribution other .* is not a FrameworkSpec"):
        registry["odd"]


def test_setting_a_name_replaces_it_in_this_process_until_removed(monkeypatch: pytest.MonkeyPatch) -> None:
    _installed(monkeypatch, "test.group")
    registry: Registry[Any] = Registry("test.group", {"own": "collections:Counter"})
    registry["own"] = "collections:deque"
    registry["new"] = 42
    import collections

    assert registry["own"] is collections.deque and registry["new"] == 42
    assert registry.source("new") == "this process"
    del registry["new"]
    assert list(registry) == ["own"]


def test_a_distribution_taking_a_built_in_name_stops_the_cli_with_one_line(tmp_path: Path) -> None:
    # Given an installed distribution (its metadata on the path) that declares a framework `pytorch`
    info = tmp_path / "intruder-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: intruder\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[mlscope.frameworks]\npytorch = intruder:FRAMEWORK\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(tmp_path)])}
    # When the frameworks are listed
    done = subprocess.run(
        [sys.executable, "-m", "mlscope", "frameworks"], env=env, capture_output=True, text=True, timeout=60
    )
    # Then it stops as on a user's mistake (exit 2), naming both declarations, with no traceback
    assert done.returncode == 2, done.stderr
    assert "'pytorch' is declared twice, by mlscope (built in)" in done.stderr
    assert "distribution intruder (intruder:FRAMEWORK)" in done.stderr and "Traceback" not in done.stderr


def test_a_predictor_s_optional_capabilities_are_the_methods_it_defines() -> None:
    from mlscope.runtime.frameworks import load_predictor_class
    from mlscope.runtime.predictors.base import Predictor
    from mlscope.runtime.predictors.capabilities import Generates, TracesPasses, WarmStarts

    def capabilities(cls: type[Predictor]) -> set[str]:
        protocols = {"generates": Generates, "warm": WarmStarts, "traces": TracesPasses}
        return {name for name, protocol in protocols.items() if issubclass(cls, protocol)}

    assert capabilities(load_predictor_class("pytorch")) == {"generates", "warm", "traces"}
    assert capabilities(load_predictor_class("onnxruntime")) == {"warm", "traces"}
    assert capabilities(load_predictor_class("endpoint")) == {"generates"}
    # And the interface itself promises none of them
    assert capabilities(Predictor) == set()


def test_a_predictor_without_a_profiler_gets_an_unsupported_pass_not_an_error(tmp_path: Path) -> None:
    from mlscope.runtime.measure import MeasureSettings
    from mlscope.runtime.predictors.base import Predictor
    from mlscope.runtime.trace.passes import run_traced_passes
    from mlscope.runtime.trace.spans import Tracer

    class Plain(Predictor):
        """The interface's methods only: no capability."""

        NAME = "plain"

        @classmethod
        def framework_version(cls) -> str:
            return "0"

        @classmethod
        def libraries(cls) -> dict[str, Any]:
            return {}

        def load(self) -> None: ...

        def prepare(self, arrays: dict[str, Any]) -> Any:
            return arrays

        def predict(self, batch: Any) -> Any:
            return batch

        def outputs_to_numpy(self, outputs: Any) -> dict[str, Any]:
            return outputs

    # Given a predictor with no trace_pass, When a FRAMEWORK-level trace runs its passes
    tracer = Tracer("FRAMEWORK")
    predictor = Plain.__new__(Plain)
    run_traced_passes(predictor, lambda size: {}, [1], tracer, MeasureSettings())
    # Then the pass is recorded as not supported, with why
    (profiled,) = [span for span in tracer.drain() if span["name"] == "profile FRAMEWORK"]
    assert profiled["attributes"]["supported"] is False
    assert profiled["attributes"]["note"] == "plain has no FRAMEWORK profiler in mlscope"


def test_entries_that_do_not_know_their_distribution_are_told_apart_by_what_they_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given Python 3.9's entry points (no distribution): mlscope's own, stale, and a plugin's listed twice
    own = importlib.metadata.EntryPoint("gone", "mlscope.gone:Thing", "test.group")
    plugin = importlib.metadata.EntryPoint("extra", "collections:OrderedDict", "test.group")
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda: {"test.group": [own, plugin, plugin]})
    registry: Registry[Any] = Registry("test.group", {"own": "collections:Counter"})
    # Then mlscope's own are its table's, and the plugin is one entry
    assert list(registry) == ["own", "extra"]
    assert registry.source("extra") == "entry point collections:OrderedDict"


def test_the_installed_metadata_is_scanned_once_while_the_path_stays(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Given a metadata scan that counts its calls
    scans: list[int] = []

    class Found:
        def select(self, group: str) -> list[_Entry]:
            return []

    def scan() -> Found:
        scans.append(1)
        return Found()

    monkeypatch.setattr(importlib.metadata, "entry_points", scan)
    # When two groups' registries list their entries
    list(Registry("mlscope.test-one", {"a": "collections:deque"}))
    list(Registry("mlscope.test-two", {"b": "collections:deque"}))
    # Then the metadata was read once for both
    assert len(scans) == 1
    # And read again once the path changes (a distribution may have been added to it)
    monkeypatch.syspath_prepend(str(tmp_path))
    list(Registry("mlscope.test-three", {}))
    assert len(scans) == 2
