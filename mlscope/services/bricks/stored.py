"""Bricks looked up among one stored system's results, never measured: what an estimate from stored
bricks alone is made of (POST /api/v1/bricks/estimates, which runs no model).

`StoredBrickRuns` is `BrickRuns` with the measuring taken out: its lookups read the given store for
the given system, at the framework version installed where the model is decomposed (a brick's key
comes from the graph that version optimises); a brick it does not find stays missing.

    REF ─▶ decomposed here ─▶ each brick the estimate needs: stored for (name, framework, version,
        system)? ─▶ all found: composed (estimate, interval of the mean, bounds); else: the coverage
        and the missing bricks' names
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from mlscope.contract.errors import UserError
from mlscope.contract.manifest import Manifest
from mlscope.contract.settings import Settings
from mlscope.registry.models import ModelRegistry
from mlscope.runtime.predictors.files import UPLOAD_URL, local_file
from mlscope.services.bricks.pipeline import BrickBench
from mlscope.services.bricks.registry import check_brick_framework
from mlscope.store import Store
from mlscope.workers.bricks import BrickJobReport, BrickRuns

__all__ = ["NOT_STORED", "StoredBrickRuns", "estimate_stored"]

# Why a brick has no result in an estimate from stored bricks: nothing is measured there.
NOT_STORED = "not stored for this system: an estimate from stored bricks measures nothing"


@dataclass
class StoredBrickRuns(BrickRuns):
    """The bricks `store` holds for system `system_id`; nothing is measured.

    Attributes:
        store: the store the lookups read (the caller's: not closed here).
        system_id: the system whose bricks are looked up.
        models: the manifests model references resolve against (None: the settings').
        uploads: an uploaded model's file by its SHA-256 (the API's own uploads, where a
            `sha256:<hex>` model is kept); None: in the cache, as a farm worker keeps one.
    """

    store: Store | None = None
    system_id: str = ""
    models: ModelRegistry | None = None
    uploads: Callable[[str], Path] | None = None

    def __post_init__(self) -> None:
        self._check_setup()
        self.registry = (
            self.models if self.models is not None else ModelRegistry.load(self.settings.manifests)
        )
        self.system = {"id": self.system_id}
        self._store = self.store

    def resolve(self, ref: str) -> tuple[Manifest, Path]:
        """The manifest `ref` resolves to, and its ONNX graph: an uploaded model's own file where
        `uploads` keeps it, else as `BrickRuns.resolve` finds it.

        Raises:
            UserError: `ref` names no model this framework can run.
            PredictorError: the file differs from its SHA-256, or the export failed.
        """
        manifest = self.admit(ref)
        source = manifest.source
        upload = UPLOAD_URL.match(source.target) if source.kind == "onnx" else None
        if upload is None or self.uploads is None:
            return super().resolve(ref)
        return manifest, local_file(str(self.uploads(upload.group(1))), upload.group(1))

    def place(self) -> dict[str, Any]:
        """The system the bricks were looked up for."""
        return {"system_id": self.system_id}

    def close(self) -> None:
        """Nothing to close: the store is the caller's."""

    def measure(self, bricks: Sequence[tuple[str, str, Any, int]]) -> BrickJobReport:
        """Every brick not stored: nothing is measured."""
        return BrickJobReport(results={key: NOT_STORED for key, *_ in bricks})

    def measure_modules(
        self, bricks: Sequence[tuple[str, str, Any, int, Mapping[str, Any]]], cudnn_benchmark: bool = False
    ) -> BrickJobReport:
        """Every brick not stored: nothing is measured."""
        return BrickJobReport(results={key: NOT_STORED for key, *_ in bricks})

    def whole(self, ref: str, fields: Mapping[str, Any]) -> tuple[Mapping[str, Any], float]:
        """Refused: an estimate from stored bricks runs no model."""
        raise UserError("an estimate from stored bricks measures no model whole", field="model")


def estimate_stored(
    ref: str,
    *,
    system_id: str,
    store: Store,
    settings: Settings,
    framework: str = "onnxruntime",
    threads: int | None = None,
    models: ModelRegistry | None = None,
    uploads: Callable[[str], Path] | None = None,
) -> dict[str, Any]:
    """Model `ref`'s latency estimate on system `system_id` from the bricks `store` holds for it, with
    the coverage and the missing bricks' names (`BrickBench.estimate_stored`); nothing is measured.

    Args:
        ref: a model reference, as `mlscope bricks` takes it.
        system_id: the system whose stored bricks are composed (the caller checks it is stored).
        store: the store to read (left open).
        settings: where graphs are exported and decomposed (its cache directory).
        framework: whose decomposition: one of the `mlscope.bricks` registry's names.
        threads: the intra-op threads the bricks were measured with (part of their keys).
        models: the manifests `ref` resolves against (None: the settings').
        uploads: an uploaded model's file by its SHA-256 (`StoredBrickRuns.uploads`).

    Raises:
        UserError: a framework whose models cannot be cut into bricks, or not installed here (field
            `framework`), or a reference no manifest resolves (field `model`).
    """
    check_brick_framework(framework)
    runs = partial(StoredBrickRuns, store=store, system_id=system_id, models=models, uploads=uploads)
    with BrickBench(settings, whole={}, threads=threads, framework=framework, make_runs=runs) as bench:
        return bench.estimate_stored(ref)
