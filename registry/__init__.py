"""What can be evaluated: model manifests (schema, loading, the registry) and their processing steps.

Importing this package loads no deep-learning framework: manifests are data.
"""

from mlscope.registry.manifest import (
    SOURCE_KINDS,
    TASKS,
    FrameworkRequirement,
    Manifest,
    ManifestError,
    OutputSpec,
    Source,
    Step,
    TensorSpec,
    Weights,
    load_manifest,
    parse_manifest,
    parse_manifest_text,
)
from mlscope.registry.models import ModelRegistry
from mlscope.registry.steps import (
    DTYPES,
    STAGES,
    STEPS,
    StepDefinition,
    apply_steps,
    get_step,
    register_step,
    steps_for,
)

__all__ = [
    "DTYPES",
    "SOURCE_KINDS",
    "STAGES",
    "STEPS",
    "TASKS",
    "FrameworkRequirement",
    "Manifest",
    "ManifestError",
    "ModelRegistry",
    "OutputSpec",
    "Source",
    "Step",
    "StepDefinition",
    "TensorSpec",
    "Weights",
    "apply_steps",
    "get_step",
    "load_manifest",
    "parse_manifest",
    "parse_manifest_text",
    "register_step",
    "steps_for",
]
