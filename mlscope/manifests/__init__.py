"""The model manifests shipped with mlscope: one YAML file per model and framework."""
