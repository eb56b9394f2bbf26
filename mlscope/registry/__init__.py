"""mlscope.registry: what can be evaluated and where — the model manifests that ship with mlscope or
sit in MLSCOPE_MANIFESTS (`ModelRegistry`), and the live agents of a farm (`AgentRegistry`).

Importing this package loads no deep-learning framework: manifests are data.
"""
