"""mlscope.workers: the worker process, the evaluation pipeline from admission to stored result, the
runners (inline, process, docker), framework environments and predictor images."""
