"""mlscope.analysis: what is computed over stored results. Pure functions over the spans and rows a
Store returns, never database code: where a traced inference spent its time (`traces`: layer
breakdowns, hotspots, kernels) and the trace as a timeline (`timeline`: a summary and the Chrome Trace
Event Format export). The API and the CLI read the store (`mlscope.store.iter_spans`) and hand what it
returns to these functions. History (`changepoints`: E-divisive means with a permutation test;
`history`: a series with its change points, the regressions since a date, one result judged against
its series) is the exception that reads the store itself, through the Store interface only, since a
regression scan reads one series after another. `bricks` cuts an ONNX Runtime graph into layers,
keys them and composes a latency estimate and Benanza's bounds from their measured times (measuring
them is `mlscope.workers.bricks`'s)."""
