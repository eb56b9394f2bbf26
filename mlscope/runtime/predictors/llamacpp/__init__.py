"""llama.cpp (llama-cpp-python): a catalogue decoder written as a GGUF file (`gguf_file`) and run by
llama.cpp in this process for the generate scenario (`predictor`, `engine`), and llama.cpp's own
OpenAI-compatible server on the same file for `--compare-served` (`serve`). docs/llamacpp.md.

Imports no framework: this registration is read wherever frameworks are listed.
"""

from __future__ import annotations

from mlscope.runtime.frameworks import FrameworkSpec

FRAMEWORK = FrameworkSpec(
    name="llamacpp",
    display="llama.cpp",
    import_name="llama_cpp",
    distributions=("llama_cpp_python", "llama-cpp-python"),
    predictor="mlscope.runtime.predictors.llamacpp.predictor:LlamaCppPredictor",
    # A transformers decoder, written as GGUF from the model directory PyTorch's generate path builds.
    sources=frozenset({"transformers"}),
    install_hint="pip install 'mlscope[llamacpp]'",
    order=60,
    # Its image installs llama-cpp-python from a wheel built on the host (pip's wheel cache: seconds
    # once mlscope's venv has compiled it) and little else: minutes and about 360 MB.
    image_by_default=True,
    system_distributions=("llama_cpp_python", "gguf"),
    generates=True,
    generates_only=True,
    # `--option gguf_type=f32|f16|q8_0|q4_0`: the GGUF file's tensor type.
    options=frozenset({"gguf_type"}),
    # Written before the job runs, on the machine that admits it (it has transformers and gguf), into
    # the cache: the predictor, in process or in its image (llama-cpp-python and numpy only), finds it.
    admit="mlscope.runtime.predictors.llamacpp.gguf_file:admit",
    # Run when named (-f llamacpp): a model's run without -f measures what it measured before.
    by_default=False,
    # The catalogue's Llama, the one architecture the GGUF writer lays out.
    model_types=frozenset({"llama"}),
    model_version=">=0.3",
)
