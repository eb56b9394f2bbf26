"""The GPU check's table (ops/ci/gpu-smoke.sh, docs/gpu.md): one row per test under tests/gpu, read
from pytest's JUnit XML, with its check, its result and the figure the test recorded
(`record_property("figure", ...)`).

Standard library only: it runs before anything is installed (`--list`, the dry run's list of checks,
read from the test files themselves) and after pytest (the table).

    python3 ops/ci/gpu_report.py --list
    python3 ops/ci/gpu_report.py JUNIT_XML [--markdown FILE]

The table's exit code is 1 when any check did not pass: failed, an error, skipped (the check sets
MLSCOPE_REQUIRE_GPU=1: nothing may skip) or absent from the XML (pytest did not get to it); else 0.
"""

from __future__ import annotations

import argparse
import ast
import sys
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests" / "gpu"

# Each GPU test's check, as the table names it; a test not named here is shown by its own name.
CHECKS = {
    "test_cuda_event_latency_is_positive_and_inside_the_host_clock_latency": "CUDA events vs host clock",
    "test_nvml_energy_of_the_measured_queries_is_positive_and_matches_the_power_readings": "NVML energy",
    "test_peak_device_memory_holds_the_weights_and_a_batch_of_hidden_activations": "peak device memory",
    "test_the_library_pass_records_the_cuda_kernels_of_each_inference": "CUDA kernels (LIBRARY trace)",
    "test_the_hardware_pass_samples_the_gpu_through_nvml": "NVML samples (HARDWARE trace)",
    "test_bricks_on_cuda_estimate_the_model_and_report_the_cudnn_gap_of_each_convolution": (
        "bricks --device cuda, cuDNN gap"
    ),
    "test_a_model_warm_started_onto_the_gpu_answers_as_the_cold_one": "warm start onto the GPU",
    "test_mlscope_run_on_cuda_warm_starts_a_second_process_from_the_store": "warm start, mlscope run",
    "test_tensorrt_builds_an_engine_from_the_onnx_graph_and_answers_as_pytorch": "TensorRT engine vs PyTorch",
    "test_torch_compile_on_the_gpu_is_timed_apart_and_answers_as_eager": "torch.compile on the GPU",
    "test_bf16_on_the_gpu_differs_from_fp32_by_its_rounding": "bf16 on the GPU vs fp32",
    "test_generation_on_the_gpu_times_each_token_in_order_within_its_request": (
        "generate in process (TTFT, ITL)"
    ),
}
FIGURE_WIDTH = 110


@dataclass(frozen=True)
class Row:
    check: str
    test: str  # "file.py::name"
    result: str  # PASS, FAIL, ERROR, SKIP or NOT RUN
    figure: str  # the recorded figure, or why it did not pass


def gpu_tests(folder: Path = TESTS) -> list[str]:
    """Every test function under `folder`, as "file.py::name", in file and source order."""
    found = []
    for path in sorted(folder.glob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found += [
            f"{path.name}::{node.name}"
            for node in tree.body
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_")
        ]
    return found


def check_of(test: str) -> str:
    name = test.partition("::")[2]
    return CHECKS.get(name, name.removeprefix("test_").replace("_", " "))


def _why(element: ElementTree.Element) -> str:
    """What a failure, error or skip says: its message, else the last line of its text."""
    lines = [line for line in (element.text or "").splitlines() if line.strip()]
    return element.get("message") or (lines[-1] if lines else "")


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= FIGURE_WIDTH else line[: FIGURE_WIDTH - 1] + "…"


def read_rows(junit: Path | None, expected: list[str]) -> list[Row]:
    """A row per expected test (absent from the XML: NOT RUN), then any other test the XML holds."""
    outcomes: dict[str, tuple[str, str]] = {}
    if junit is not None and junit.is_file():
        for case in ElementTree.parse(junit).getroot().iter("testcase"):
            module = (case.get("classname") or "").rpartition(".")[2]
            test = f"{module}.py::{(case.get('name') or '').partition('[')[0]}"
            properties = {p.get("name"): p.get("value") or "" for p in case.iter("property")}
            result, figure = "PASS", properties.get("figure", "")
            for tag, name in (("failure", "FAIL"), ("error", "ERROR"), ("skipped", "SKIP")):
                element = case.find(tag)
                if element is not None:
                    result, figure = name, _why(element)
                    break
            outcomes[test] = (result, _one_line(figure))
    missing = ("NOT RUN", "pytest did not report it")
    rows = [Row(check_of(test), test, *outcomes.pop(test, missing)) for test in expected]
    rows += [Row(check_of(test), test, *outcome) for test, outcome in outcomes.items()]
    return rows


def table(rows: list[Row]) -> str:
    """The rows as a fixed-width text table: check, result, figure."""
    header = ("check", "result", "figure")
    cells = [header, *((row.check, row.result, row.figure) for row in rows)]
    widths = [max(len(cell[i]) for cell in cells) for i in range(2)]
    lines = [f"{c:<{widths[0]}}  {r:<{widths[1]}}  {f}".rstrip() for c, r, f in cells]
    lines.insert(1, f"{'-' * widths[0]}  {'-' * widths[1]}  {'-' * 6}")
    return "\n".join(lines)


def markdown(rows: list[Row]) -> str:
    """The rows as a Markdown table, for docs/gpu.md."""
    lines = ["| check | result | figure |", "| --- | --- | --- |"]
    lines += [f"| {row.check} | {row.result} | {row.figure.replace('|', '/')} |" for row in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The GPU check's table, from pytest's JUnit XML.")
    parser.add_argument("junit", nargs="?", type=Path, help="pytest's --junitxml file")
    parser.add_argument("--list", action="store_true", help="list the checks (the tests under tests/gpu)")
    parser.add_argument("--markdown", type=Path, help="also write the table as Markdown to this file")
    arguments = parser.parse_args(argv)
    expected = gpu_tests()
    if arguments.list:
        for test in expected:
            print(f"  {check_of(test):<34} tests/gpu/{test}")
        return 0
    if arguments.junit is None:
        parser.error("give the JUnit XML file, or --list")
    rows = read_rows(arguments.junit, expected)
    if not arguments.junit.is_file():
        print(f"gpu-smoke: no test results at {arguments.junit}: pytest did not finish", file=sys.stderr)
    print(table(rows))
    if arguments.markdown is not None:
        arguments.markdown.write_text(markdown(rows) + "\n", encoding="utf-8")
    passed = sum(row.result == "PASS" for row in rows)
    print(f"\n{passed} of {len(rows)} checks passed")
    return 0 if rows and passed == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
