"""The house rules, checked on every run: modules stay small, the shared names have one home that
the implementations follow, and nothing outside a framework's own sub-package branches on its name.
(The direction of imports between parts is checked by `lint-imports` in `make lint`.)"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mlscope.contract import names
from mlscope.runtime.frameworks import FRAMEWORKS
from mlscope.runtime.generate import SCENARIO as GENERATE
from mlscope.runtime.measure.scenarios import SCENARIOS
from mlscope.workers.runners import RUNNERS
from tests.conftest import REPO

PACKAGE = REPO / "mlscope"
MAX_LINES = 500


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_no_module_is_over_500_lines() -> None:
    # Given every module of the package
    sizes = {path.relative_to(REPO).as_posix(): len(path.read_text().splitlines()) for path in _modules()}
    # Then none is longer than the house limit
    assert sizes and {name: n for name, n in sizes.items() if n > MAX_LINES} == {}


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


@pytest.mark.parametrize("first", ["pytorch", "onnxruntime.export", "tensorflow", "mxnet", "caffe2"])
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
