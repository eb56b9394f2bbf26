"""The bricks service (DLBricks): a model cut into layer bricks, each brick measured once per system
and stored, and the model's latency composed from them (docs/bricks.md).

    run_bricks(refs, framework=..., runs=...)        # estimate and measure whole: (reports, summary)
    estimate_stored(ref, system_id=..., store=...)   # compose from stored bricks only: measures nothing

The command line (`mlscope bricks`), the Python API (`mlscope.bricks`) and the HTTP API
(POST /api/v1/bricks/estimates) call these. Which frameworks do bricks is the `mlscope.bricks`
registry's (`registry.BRICKS`); the pipeline is `pipeline.BrickBench`, PyTorch's part `pytorch`, the
prediction interval's pairs `calibration`.

Importing the package imports nothing: each caller imports the module it uses (`registry` is read
without numpy or a framework, so a verb's help lists its names).
"""
