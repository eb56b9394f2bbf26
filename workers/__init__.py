"""mlscope.workers: the evaluation pipeline, its runners, predictors and measurement."""
