"""The house rules, checked on every run: the shared names have one home that the implementations
follow, nothing outside a framework's own sub-package branches on its name, every exception derives
from MlscopeError, and no two public classes share a name. (The direction of imports between parts is
checked by `lint-imports` in `make lint`, which also reports modules over the soft size limit:
ops/module_sizes.py.)"""

from __future__ import annotations

import ast
import builtins
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mlscope.contract import names
from mlscope.runtime.frameworks import FRAMEWORKS
from mlscope.runtime.generate import SCENARIO as GENERATE
from mlscope.runtime.scenarios import SCENARIOS
from mlscope.workers.runners import RUNNERS
from tests.conftest import REPO

PACKAGE = REPO / "mlscope"
MODULE_SIZES = REPO / "ops" / "module_sizes.py"


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_the_size_report_warns_of_a_module_over_the_soft_limit_and_exits_0(tmp_path: Path) -> None:
    # Given a repository whose package has one module a line over the limit and one at it
    (tmp_path / "mlscope" / "part").mkdir(parents=True)
    (tmp_path / "mlscope" / "part" / "long.py").write_text("x = 1\n" * 601)
    (tmp_path / "mlscope" / "fits.py").write_text("x = 1\n" * 600)
    # When the report reads it
    done = subprocess.run(
        [sys.executable, str(MODULE_SIZES), str(tmp_path), "--limit", "600"], capture_output=True, text=True
    )
    # Then it names the first only, as a warning, and does not fail
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["warning: mlscope/part/long.py has 601 lines (soft limit 600)"]


def _sources() -> dict[str, str]:
    return {path.relative_to(REPO).as_posix(): path.read_text() for path in _modules()}


def _base_name(base: ast.expr) -> str | None:
    """The class a base names: `Error`, `module.Error`, `Generic[T]` (its `Generic`)."""
    if isinstance(base, ast.Subscript):
        base = base.value
    if isinstance(base, ast.Attribute):
        return base.attr
    return base.id if isinstance(base, ast.Name) else None


_BUILTIN_EXCEPTIONS = {
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException)
}


def _stray_exceptions(sources: dict[str, str]) -> list[str]:
    """The exception classes of `sources` (module: text) that do not derive from MlscopeError, as
    "module: Class". A base is looked up among the classes of its own module, then of all; one defined
    nowhere there is an exception when it is a built-in one or a library's named *Error, *Exception or
    *Warning (`werkzeug.exceptions.HTTPException`)."""
    classes: dict[tuple[str, str], list[str]] = {}
    for module, text in sources.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                bases = [name for base in node.bases if (name := _base_name(base)) is not None]
                classes[(module, node.name)] = bases
    by_name: dict[str, list[tuple[str, str]]] = {}
    for key in classes:
        by_name.setdefault(key[1], []).append(key)

    def defined(module: str, name: str) -> list[tuple[str, str]]:
        return [(module, name)] if (module, name) in classes else by_name.get(name, [])

    def leads_to(module: str, name: str, roots: set[str], library: bool, seen: frozenset[str]) -> bool:
        if name in roots:
            return True
        found = defined(module, name)
        if not found:
            return library and (
                name in _BUILTIN_EXCEPTIONS or name.endswith(("Error", "Exception", "Warning"))
            )
        return any(
            leads_to(where, base, roots, library, seen | {name})
            for where, own in found
            if own not in seen
            for base in classes[(where, own)]
        )

    return [
        f"{module}: {name}"
        for (module, name), bases in classes.items()
        if name != "MlscopeError"
        and any(leads_to(module, base, set(_BUILTIN_EXCEPTIONS), True, frozenset({name})) for base in bases)
        and not any(leads_to(module, base, {"MlscopeError"}, False, frozenset({name})) for base in bases)
    ]


def test_every_exception_derives_from_mlscope_error() -> None:
    # Given every class of the package, read as source (a framework's module need not import here)
    sources = _sources()
    assert "class MlscopeError(Exception)" in sources["mlscope/contract/errors.py"]
    # Then each exception among them has MlscopeError among its ancestors
    assert _stray_exceptions(sources) == []


def test_the_exception_check_names_a_stray_exception() -> None:
    # The check above must be able to fail: through built-ins, libraries and the package's own classes.
    sources = {
        "a.py": "class Ours(MlscopeError): pass\nclass Both(Ours, TimeoutError): pass\n"
        "class Bad(ValueError): pass\n",
        "b.py": "class Sub(Ours): pass\nclass Worse(Bad): pass\nclass Web(exceptions.HTTPException): pass\n"
        "class Plain(Generic[T]): pass\nclass Spec(Plain): pass\n",
    }
    assert _stray_exceptions(sources) == ["a.py: Bad", "b.py: Worse", "b.py: Web"]


def _public_classes(sources: dict[str, str]) -> dict[str, list[str]]:
    """Each public class name of `sources` and the modules defining it; a class inside another's body
    (marshmallow's `Meta`) is that class's attribute, not counted."""
    found: dict[str, list[str]] = {}
    for module, text in sources.items():
        tree = ast.parse(text)
        nested = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.ClassDef)
            for inner in node.body
            if isinstance(inner, ast.ClassDef)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and id(node) not in nested and not node.name.startswith("_"):
                found.setdefault(node.name, []).append(module)
    return found


def test_no_two_public_classes_share_a_name() -> None:
    # A name names one thing: reading `Job` or `Outcome` says which without looking at the import.
    shared = {name: modules for name, modules in _public_classes(_sources()).items() if len(modules) > 1}
    assert shared == {}


def test_the_name_check_sees_two_classes_of_one_name() -> None:
    sources = {
        "a.py": "class Job: pass\nclass _Private: pass\nclass S:\n    class Meta: pass\n",
        "b.py": "class Job: pass\nclass _Private: pass\nclass T:\n    class Meta: pass\n",
    }
    assert _public_classes(sources) == {"Job": ["a.py", "b.py"], "S": ["a.py"], "T": ["b.py"]}


def test_the_runtime_implements_exactly_the_scenarios_and_runners_the_contract_names() -> None:
    # The generate scenario is the generate package's, not a measurement loop's.
    assert set(SCENARIOS) | {GENERATE} == set(names.SCENARIOS)
    assert set(RUNNERS) == set(names.RUNNERS)


def _branches_on(source: str, framework_names: set[str]) -> list[int]:
    """Lines comparing something with a framework's name: `x == "pytorch"`, `x in ("mxnet", ...)`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        literals: list[object] = []
        for operand in operands:
            if isinstance(operand, ast.Constant):
                literals.append(operand.value)
            elif isinstance(operand, ast.Tuple | ast.List | ast.Set):
                literals += [e.value for e in operand.elts if isinstance(e, ast.Constant)]
        if any(isinstance(v, str) and v in framework_names for v in literals):
            found.append(node.lineno)
    return found


def test_no_part_outside_a_frameworks_sub_package_branches_on_its_name() -> None:
    # Given the registered frameworks' names (and their import names: `torch`, `mxnet` ...)
    framework_names = set(FRAMEWORKS) | {spec.import_name for spec in FRAMEWORKS.values()}
    assert {"pytorch", "onnxruntime", "tensorflow", "mxnet", "caffe2"} <= framework_names
    predictors = PACKAGE / "runtime" / "predictors"
    # When every module outside runtime/predictors/ is read
    offenders = {
        path.relative_to(REPO).as_posix(): lines
        for path in _modules()
        if predictors not in path.parents and (lines := _branches_on(path.read_text(), framework_names))
    }
    # Then none compares a value with a framework's name
    assert offenders == {}


def test_the_branching_check_sees_a_comparison_with_a_framework_name() -> None:
    # The check above must be able to fail: it finds both shapes of branching.
    source = 'if job.framework != "onnxruntime":\n    pass\nok = name in ("mxnet", "x")\n'
    assert _branches_on(source, {"onnxruntime", "mxnet"}) == [1, 3]
    assert _branches_on('if kind == "onnx":\n    pass\n', {"onnxruntime"}) == []


def test_every_part_says_what_it_owns() -> None:
    # Each part's package docstring is the first thing a newcomer reads.
    for part in sorted(p for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()):
        text = (part / "__init__.py").read_text()
        assert re.match(r'\s*"""\S', text), f"{part.name}/__init__.py has no docstring"


def test_every_framework_registration_defers_its_annotations() -> None:
    # Given the registrations every predictor process imports (runtime/system.py lists them all),
    # in framework environments as old as Caffe2's Python 3.9, where `str | None` in a function's
    # annotations fails when the module is imported unless annotations are deferred
    registrations = sorted((PACKAGE / "runtime" / "predictors").glob("*/__init__.py"))
    assert len(registrations) >= len(FRAMEWORKS)
    # Then each defers them
    for path in registrations:
        tree = ast.parse(path.read_text())
        deferred = any(
            isinstance(node, ast.ImportFrom)
            and node.module == "__future__"
            and any(alias.name == "annotations" for alias in node.names)
            for node in tree.body
        )
        assert deferred, f"{path.relative_to(REPO)} lacks `from __future__ import annotations`"


@pytest.mark.parametrize(
    "first", ["pytorch", "onnxruntime.export", "openvino", "tensorflow", "mxnet", "caffe2"]
)
def test_every_framework_is_registered_whichever_module_is_imported_first(first: str) -> None:
    # A process that imports a predictor package before the registry is inside that package while
    # the registry looks for it: the package must still end up registered, and in order.
    code = (
        f"import mlscope.runtime.predictors.{first}\n"
        "from mlscope.runtime.frameworks import FRAMEWORKS\n"
        "print(','.join(FRAMEWORKS))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ",".join(FRAMEWORKS)
