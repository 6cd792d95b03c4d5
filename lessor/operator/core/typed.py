"""An informer's cache read as lessor's models: what controller-runtime's typed cache gives a Go
reconciler (`List(ctx, &instances)` hands back decoded structs, never maps).

An object is validated when it is read, and its model kept for the version it was read at, so a
pool whose instances and leases are read at each of its passes validates each version once (a
stored ClusterLease takes about 65 microseconds to validate on this machine). The raw object
travels with its model: its metadata (uid, resourceVersion) fences every write
(lessor.operator.core.writes), and a model is not what kube-apiserver is sent back.

A kept model is shared by every reconcile that reads that version: change a copy of it
(`model_copy(deep=True)`), never the model itself.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from cachetools import LRUCache

from lessor.operator.runtime.informer import Informer
from lessor.operator.runtime.store import Handler, key_of, version_of
from lessor.protocol.json_object import Json
from lessor.resources.base import Resource

T = TypeVar("T", bound=Resource[Any, Any])

# Models kept per kind: a large pool's instances and leases, read at each of its passes.
MODELS_KEPT = 1024


@dataclass(frozen=True, slots=True)
class Cached(Generic[T]):
    """An object as the cache holds it, and its model."""

    raw: Json
    model: T

    @property
    def key(self) -> str:
        return key_of(self.raw)

    @property
    def uid(self) -> str:
        return str(self.raw["metadata"]["uid"])

    @property
    def name(self) -> str:
        return str(self.raw["metadata"]["name"])

    @property
    def deleting(self) -> bool:
        return self.model.metadata.deletion_timestamp is not None


class Typed(Generic[T]):
    """The models of one informer's objects. `informer` stays reachable for what is generic
    (watches, indexers, readiness).

    The models kept are bounded (MODELS_KEPT, least recently read first out): what a reconcile
    reads again is a pool's instances and leases, a hot set far smaller than the cache, and a
    model of every cached object costs about as much memory again as the cache itself. Only the
    version and the model are kept: the raw object is always the store's own. Measured with
    10,000 leases and 1,000 pools (bench.operator_scale, bench/README.md "Issue 48"): RSS at
    drain 227 MiB before typed caches, 412 MiB keeping every model with the raw object it came
    from, 314 MiB keeping 16,384 models, 250 MiB keeping 1,024."""

    def __init__(self, informer: Informer, model: type[T]) -> None:
        self.informer = informer
        self.model = model
        self._models: LRUCache[str, tuple[tuple[str, str], T]] = LRUCache(MODELS_KEPT)
        informer.store.add_handler(Handler(on_delete=self._forget))

    def decode(self, raw: Json) -> Cached[T]:
        """`raw` with its model, validated unless this version of it already was. Also for an
        object a write just answered with: its version is the one the watch brings next."""
        key, version = key_of(raw), version_of(raw)
        known = self._models.get(key)
        if known is not None and version is not None and known[0] == version:
            return Cached(raw, known[1])
        model = self.model.model_validate(raw)
        if version is not None:
            self._models[key] = (version, model)
        return Cached(raw, model)

    def get(self, key: str) -> Cached[T] | None:
        raw = self.informer.store.get(key)
        return None if raw is None else self.decode(raw)

    def list(self) -> builtins.list[Cached[T]]:
        return [self.decode(raw) for raw in self.informer.store.list()]

    def by_index(self, index: str, value: str) -> builtins.list[Cached[T]]:
        return [self.decode(raw) for raw in self.informer.store.by_index(index, value)]

    def _forget(self, obj: Json) -> None:
        self._models.pop(key_of(obj), None)
