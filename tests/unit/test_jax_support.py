"""JAX's parts that need no inference: which models it has Flax definitions of (refused at admission
in one line otherwise, with nothing stored) and the conversion of XLA's profiler events into layer
spans. tests/integration/test_jax.py runs JAX."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlscope.contract.errors import UserError
from mlscope.registry.catalogue import Catalogue
from mlscope.registry.models import ModelRegistry
from mlscope.runtime.predictors.jax.profile import XlaRun, xla_runs, xla_to_spans
from mlscope.runtime.predictors.jax.support import SUPPORTED, model_refusal
from mlscope.workers.admission import admit


@pytest.mark.parametrize(
    "name", ["resnet18", "resnet50", "mobilenet_v3_small", "vit_b_16", "llama_tiny", "bert_base"]
)
def test_jaxs_shipped_manifests_are_models_it_has_a_definition_of(name: str) -> None:
    # Given a manifest shipped for JAX
    manifest = ModelRegistry.load().get(name, "jax")
    # When JAX's support is asked about it, Then it has a definition of it
    assert model_refusal(manifest) is None


def test_the_catalogue_offers_jax_the_architectures_it_has_a_definition_of_and_no_other() -> None:
    # Given the catalogue
    catalogue = Catalogue.load()
    # When its entries meant for JAX are listed
    offered = {entry.ref: entry for entry in catalogue.find(framework="jax")}
    # Then they are the torchvision and transformers architectures JAX has a Flax definition of
    prefix = {"torchvision": "torchvision", "transformers": "hf"}
    assert set(offered) == {f"{prefix[kind]}:{name}" for kind, names in SUPPORTED.items() for name in names}
    # And each one's manifest for JAX is one JAX runs, under the shipped JAX manifests' version constraint
    for ref in offered:
        manifest = catalogue.manifest(ref, "jax")
        assert model_refusal(manifest) is None, ref
        assert manifest.framework.version == ModelRegistry.load().get("resnet18", "jax").framework.version
    # And an architecture of the same library without a definition is not offered: asking for it on
    # JAX is refused on the framework field, in one line naming the entries JAX runs
    assert "jax" not in catalogue.get("hf:gpt2").frameworks
    with pytest.raises(UserError) as refused:
        ModelRegistry.load().get("torchvision:alexnet", "jax")
    assert refused.value.field == "framework"
    (line,) = str(refused.value).splitlines()
    assert "jax runs " in line and "torchvision:mobilenet_v3_small" in line and "hf:bert" in line, line


def test_a_torchvision_model_without_a_definition_is_refused_at_admission_naming_what_jax_runs(
    tmp_path: Path,
) -> None:
    # Given a JAX manifest of AlexNet (a torchvision builder JAX has no Flax definition of)
    shipped = Path(__file__).parents[2] / "mlscope" / "manifests" / "jax" / "resnet18.yaml"
    document = yaml.safe_load(shipped.read_text(encoding="utf-8"))
    document.update(name="alexnet_on_jax", source={"torchvision": "alexnet"})
    (tmp_path / "alexnet_on_jax.yaml").write_text(yaml.safe_dump(document), encoding="utf-8")
    # When it is admitted for JAX
    with pytest.raises(UserError) as refused:
        admit({"model": "alexnet_on_jax", "framework": "jax"}, ModelRegistry.load([tmp_path]))
    # Then it is refused on the model field, in one line listing the architectures JAX runs
    assert refused.value.field == "model"
    (line,) = str(refused.value).splitlines()
    assert "no Flax definition of torchvision alexnet" in line and "vit_b_16" in line and "llama" in line


def test_a_transformers_decoder_returning_another_output_is_refused() -> None:
    # Given the tiny Llama asked for its pooled output instead of its last hidden state
    manifest = ModelRegistry.load().get("llama_tiny", "jax")
    options = {**manifest.source.options, "output": "pooler_output"}
    other = dataclasses.replace(manifest, source=dataclasses.replace(manifest.source, options=options))
    # When JAX's support is asked, Then it says what the decoder returns
    refusal = model_refusal(other)
    assert refusal is not None and "last_hidden_state" in refusal


def _event(op: str, run: int, start: int, duration: int, module: str = "jit_forward") -> dict[str, Any]:
    return {"hlo_op": op, "hlo_module": module, "run_id": run, "start_ns": start, "duration_ns": duration}


def test_xla_events_are_grouped_by_run_in_the_order_they_started() -> None:
    # Given events of two runs, interleaved in the profiler's order, and one of another program
    events = [
        _event("fusion.2", 7, 1_500, 100),
        _event("dot.1", 9, 100, 50),
        _event("fusion.1", 7, 1_000, 200),
        _event("copy.3", 9, 200, 10),
        _event("transpose", 5, 0, 5, module="pmap_other"),
    ]
    # When they are grouped
    runs = xla_runs(events)
    # Then run 9 (started first) comes first, each run's events in start order, the other program's left out
    assert [[e["hlo_op"] for e in run] for run in runs] == [["dot.1", "copy.3"], ["fusion.1", "fusion.2"]]


def test_xla_runs_become_inferences_holding_their_instructions_on_the_callers_clock() -> None:
    # Given two traced inferences whose caller's clock reads 10_000 ns ahead of the profiler's
    runs = [
        XlaRun(10_000, 11_000, [_event("fusion.1", 1, 0, 300), _event("dot.4", 1, 400, 500)]),
        XlaRun(20_000, 20_500, [_event("fusion.1", 2, 10_000, 700)]),
    ]
    ids = iter(f"s{i}" for i in range(100))
    # When they are converted to spans
    spans = xla_to_spans(runs, trace_id="t", parent_id="pass", batch_size=4, new_id=lambda: next(ids))
    inferences = [s for s in spans if s["name"] == "inference"]
    layers = [s for s in spans if s["level"] == "FRAMEWORK"]
    # Then each inference is a MODEL span under the pass, its layers inside it, moved onto the caller's clock
    assert [(s["parent_id"], s["attributes"]["iteration"]) for s in inferences] == [("pass", 0), ("pass", 1)]
    assert [(s["name"], s["start_ns"], s["end_ns"]) for s in layers] == [
        ("fusion.1", 10_000, 10_300),
        ("dot.4", 10_400, 10_900),
        ("fusion.1", 20_000, 20_700),
    ]
    assert [s["attributes"]["layer_type"] for s in layers] == ["fusion", "dot", "fusion"]
    assert {s["attributes"]["timing"] for s in layers} == {"profiler"}
    # And the second inference is stretched to cover its one instruction that outlasted the caller's reading
    assert (inferences[1]["start_ns"], inferences[1]["end_ns"]) == (20_000, 20_700)
