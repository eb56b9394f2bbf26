"""mlscope.analysis: what is computed over stored results. Pure functions over the spans and rows a
Store returns, never database code: where a traced inference spent its time (`traces`: layer
breakdowns, hotspots, kernels) and the trace as a timeline (`timeline`: a summary and the Chrome Trace
Event Format export). The API and the CLI read the store (`mlscope.store.iter_spans`) and hand what it
returns to these functions."""
