"""The generate scenario: requests of a prompt and a forced output length, each timed token by token,
against a model in this process (a framework's engine) or behind an OpenAI-compatible endpoint.

`records` holds what every engine shares (a request, its record, the engine protocol); `driver`
issues requests (back to back, at a fixed concurrency, or as Poisson arrivals) and reduces the
records to the result's `generation` section; `endpoint` is the HTTP engine and `serve` starts a
local server for a model directory. The in-process engines live with their frameworks
(`mlscope.runtime.predictors.<framework>`).
"""

# The scenario this package serves (`mlscope.runtime.scenarios.generate` is its `Scenario`).
SCENARIO = "generate"
