"""The revisions of the SQL store's schema, oldest first (see the parent package)."""
