"""A toy store: `toystore:///path/to/file.db`, kept in an SQLite file at that path.

It is mlscope's SQL store under another URL scheme: what it shows is that a store a distribution
declares in the `mlscope.stores` group is opened by its scheme, everywhere a store URL is taken.
"""

from __future__ import annotations

from mlscope.store.sql import SQLStore

SCHEME = "toystore"


class ToyStore(SQLStore):
    """Results kept in the SQLite file the URL's path names."""

    def __init__(self, url: str, *, check_schema: bool = True) -> None:
        scheme, _, rest = url.partition("://")
        if scheme != SCHEME:
            raise ValueError(f"not a {SCHEME} URL: {url!r}")
        super().__init__(f"sqlite://{rest}", check_schema=check_schema)
