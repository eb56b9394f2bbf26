"""The Mongo store on mongomock, for the contract suite: no MongoDB server can run on the machines the
suite runs on, so the "mongomock" parameter opens `mongodb://` URLs with mongomock's client in place of
pymongo's (a mock, and every test id that uses it says "mongomock"). Every client made here shares one
in-process server, so that two stores opened on one URL see the same data, as on a real server."""

from __future__ import annotations

from typing import Any

import mongomock
from mongomock.store import ServerStore

from mlscope.store.mongo import MongoStore

__all__ = ["MongomockStore", "SharedMongomockClient"]

_SERVER = ServerStore()


class SharedMongomockClient(mongomock.MongoClient):
    """mongomock's client, on the one server of this test process."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["_store"] = _SERVER
        super().__init__(*args, **kwargs)


class MongomockStore(MongoStore):
    """The Mongo store connected through SharedMongomockClient: what `open_store` returns for a
    `mongodb://` URL in the tests of the "mongomock" parameter."""

    def __init__(self, url: str, *, check_schema: bool = True) -> None:
        super().__init__(url, client_class=SharedMongomockClient, check_schema=check_schema)
