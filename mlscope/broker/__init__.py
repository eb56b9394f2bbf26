"""mlscope.broker: Celery only — the app on MLSCOPE_BROKER_URL, the task and its versioned message,
and the OpenTelemetry export of stored spans. Queue names are the contract's (`mlscope.contract.queues`)."""
