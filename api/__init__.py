"""mlscope.api: the Flask app factory, blueprints, HTTP schemas and aggregation. Filled in by the
farm work; nothing here yet."""
