"""The application services: what the command line, the Python API (`mlscope.library`) and the HTTP
API (`mlscope.api`) all offer, in one place each, above the parts that measure and analyse.

A service joins `mlscope.workers` (measuring, storing) and `mlscope.analysis` (the arithmetic on
what is stored), which may not import each other, into one use case with one entry function; the
interfaces above it only parse their input and render its output. A service imports none of the
interfaces: what one of them alone can provide (the farm, reached through the HTTP client) is passed
in. docs/architecture.md lists the layers.

    bricks: a model's latency estimated from its layers measured one by one (DLBricks)
"""
