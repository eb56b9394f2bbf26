"""JAX: the predictor (`predictor`), which builds a model as the PyTorch predictor does, copies its
weights into the Flax NNX definition of its architecture (`models`) and runs that jitted by XLA on the
CPU; which models have a definition (`support`); XLA's profiler events as layer spans (`profile`).
docs/jax.md.

Imports no framework: this registration is read wherever frameworks are listed.
"""

from __future__ import annotations

from mlscope.runtime.frameworks import FrameworkSpec

# Source kind → the targets `from_torch.from_torch` has a definition of (each family's sizes share one).
# These are also the catalogue entries offered for JAX (the registration's `model_types`).
SUPPORTED: dict[str, tuple[str, ...]] = {
    "torchvision": (
        "resnet18", "resnet34", "resnet50", "resnet101", "resnet152",
        "mobilenet_v3_small", "mobilenet_v3_large",
        "vit_b_16", "vit_b_32", "vit_l_16", "vit_l_32", "vit_h_14",
    ),
    "transformers": ("llama", "bert"),
}  # fmt: skip


FRAMEWORK = FrameworkSpec(
    name="jax",
    display="JAX",
    import_name="jax",
    distributions=("jax",),
    predictor="mlscope.runtime.predictors.jax.predictor:JaxPredictor",
    # The PyTorch sources of the architectures it has a Flax definition of (`SUPPORTED`): the
    # PyTorch module is built to take its weights, so torch is needed too.
    sources=frozenset({"torchvision", "transformers"}),
    install_hint="pip install 'mlscope[jax]'",
    order=27,
    system_distributions=("jax", "jaxlib", "flax", "torch", "torchvision", "transformers"),
    model_refusal="mlscope.runtime.predictors.jax.support:model_refusal",
    # Run when named (-f jax): a model's run without -f measures what it measured before.
    by_default=False,
    # The catalogue offers JAX the entries it has a Flax definition of, not every torchvision and
    # transformers entry; their manifests carry the shipped JAX manifests' version constraint.
    model_types=frozenset(name for names in SUPPORTED.values() for name in names),
    model_version=">=0.5",
)
