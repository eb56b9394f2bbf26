"""CLI answers to mistakes that need a registry state this machine does not have (a framework
that is registered but not installed), driven in-process."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlscope.cli import main
from mlscope.runtime import frameworks
from mlscope.runtime.frameworks import FrameworkSpec

MANIFEST = """
name: absent_model
version: "1.0"
task: other
framework: {name: absentfw, version: "*"}
source: {python: "nowhere:factory"}
weights: random
inputs: [{name: x, shape: [4], dtype: float32}]
outputs: [{name: y}]
"""


@pytest.fixture
def absent_framework(monkeypatch: pytest.MonkeyPatch) -> FrameworkSpec:
    # A registration exactly like a real plugin's, whose module is not installed here. It goes into
    # the registry's own dict (modules that imported FRAMEWORKS earlier see it), removed afterwards.
    spec = FrameworkSpec(
        name="absentfw",
        display="Absent",
        import_name="mlscope_absent_framework_module",
        distributions=("absent-framework",),
        predictor="nowhere:Predictor",
        sources=frozenset({"python"}),
        install_hint="pip install absent-framework",
    )
    monkeypatch.setitem(frameworks.FRAMEWORKS, spec.name, spec)
    return spec


def test_a_framework_that_is_not_installed_exits_2_naming_what_to_install(
    mlscope_env: dict[str, str],
    absent_framework: FrameworkSpec,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a manifest for a registered framework that is not installed here
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "absent.yaml").write_text(MANIFEST)
    monkeypatch.setenv("MLSCOPE_MANIFESTS", str(tmp_path / "m"))
    # When it is run
    with pytest.raises(SystemExit) as ended:
        main(["run", "absent_model", "-f", "absentfw"])
    # Then exit 2 with what to install, and no evaluation was stored
    assert ended.value.code == 2
    err = capsys.readouterr().err
    assert "framework 'absentfw' is not installed here (pip install absent-framework)" in err
    main(["results", "list", "--json"])
    assert capsys.readouterr().out == ""


def test_frameworks_lists_an_absent_framework_as_unavailable_with_its_reason(
    absent_framework: FrameworkSpec, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["frameworks", "--json"])
    out = capsys.readouterr().out
    assert '"name":"absentfw"' in out and '"available":false' in out and "pip install absent-framework" in out
