"""`StoreBackend` is the one list of what a backend implements: `Store` adds no abstract method of its
own and implements none of the backend's, and every backend implements every primitive with the
protocol's parameters, so the protocol, the interface and the backends cannot drift apart.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

from mlscope.store import Store
from mlscope.store.backend import StoreBackend
from mlscope.store.mongo import MongoStore
from mlscope.store.sql import SQLStore

BACKENDS = [SQLStore, MongoStore]


def _parameters(function: Callable[..., Any]) -> list[tuple[str, object, bool]]:
    # Names, kinds and whether each has a default: what a caller relies on; annotations are mypy's.
    return [
        (p.name, p.kind, p.default is not inspect.Parameter.empty)
        for p in inspect.signature(function).parameters.values()
    ]


def test_the_protocol_is_stores_whole_abstract_surface() -> None:
    assert StoreBackend.__abstractmethods__
    assert Store.__abstractmethods__ == StoreBackend.__abstractmethods__
    # No abstract method is declared anywhere between the protocol and Store: one place lists them.
    for klass in Store.__mro__:
        if klass is not StoreBackend:
            declared = {
                name for name, value in vars(klass).items() if getattr(value, "__isabstractmethod__", False)
            }
            assert not declared, f"{klass.__name__} declares abstract methods {sorted(declared)}"


def test_every_protocol_member_is_documented() -> None:
    for name in StoreBackend.__abstractmethods__:
        assert inspect.getdoc(getattr(StoreBackend, name)), name


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.__name__)
def test_a_backend_implements_every_primitive(backend: type[Store]) -> None:
    assert not backend.__abstractmethods__
    for name in sorted(StoreBackend.__abstractmethods__):
        owner = next(klass for klass in backend.__mro__ if name in vars(klass))
        assert owner not in (Store, StoreBackend), f"{backend.__name__} does not implement {name}"
        assert _parameters(getattr(backend, name)) == _parameters(getattr(StoreBackend, name)), name
    assert isinstance(backend.NAME, str) and backend.NAME


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.__name__)
def test_a_backend_overrides_a_default_with_the_same_parameters(backend: type[Store]) -> None:
    defaults = [
        name
        for name, value in vars(StoreBackend).items()
        if inspect.isfunction(value) and not getattr(value, "__isabstractmethod__", False)
    ]
    assert defaults
    for name in defaults:
        assert _parameters(getattr(backend, name)) == _parameters(getattr(StoreBackend, name)), name


def test_store_overrides_no_primitive() -> None:
    primitives = {name for name, value in vars(StoreBackend).items() if inspect.isfunction(value)}
    assert not primitives & set(vars(Store)), "Store must leave the backend's primitives to the backend"
