"""mlscope.runtime: what runs inside a predictor process or container — the framework adapters
(`predictors/<framework>/`), measurement (`measure/`), tracing (`trace/`) and the job entry point
(`execute`). It imports only `mlscope.contract`: no Celery, Flask, database or OpenTelemetry code.
"""
