"""An informer's cache read as lessor's models: what controller-runtime's typed cache gives a Go
reconciler (`List(ctx, &instances)` hands back decoded structs, never maps).

Each object is validated once per resourceVersion and the model kept beside the cached object,
so reconciles that read a pool's 200 instances at every pass pay no validation after the first
(issue 19's profile put pydantic at a third of a reconcile when each read validated again). The
raw object travels with its model: its metadata (uid, resourceVersion) fences every write
(lessor.operator.core.writes), and a model is not what kube-apiserver is sent back.

A cached model is shared by every reconcile that reads that version: change a copy
(`status_copy`), never the model itself.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from lessor.operator.runtime.informer import Informer
from lessor.operator.runtime.store import Handler, key_of
from lessor.protocol.json_object import Json
from lessor.resources.base import Resource

T = TypeVar("T", bound=Resource[Any, Any])


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
    (watches, indexers, readiness)."""

    def __init__(self, informer: Informer, model: type[T]) -> None:
        self.informer = informer
        self.model = model
        self._decoded: dict[str, Cached[T]] = {}
        informer.store.add_handler(Handler(on_delete=self._forget))

    def decode(self, raw: Json) -> Cached[T]:
        """`raw` with its model, validated unless this version of it already was. Also for an
        object a write just answered with: its version is the one the watch brings next."""
        key = key_of(raw)
        known = self._decoded.get(key)
        version = _version(raw)
        if known is not None and version is not None and _version(known.raw) == version:
            return known
        cached = Cached(raw, self.model.model_validate(raw))
        self._decoded[key] = cached
        return cached

    def get(self, key: str) -> Cached[T] | None:
        raw = self.informer.store.get(key)
        return None if raw is None else self.decode(raw)

    def list(self) -> builtins.list[Cached[T]]:
        return [self.decode(raw) for raw in self.informer.store.list()]

    def by_index(self, index: str, value: str) -> builtins.list[Cached[T]]:
        return [self.decode(raw) for raw in self.informer.store.by_index(index, value)]

    def _forget(self, obj: Json) -> None:
        self._decoded.pop(key_of(obj), None)


def _version(obj: Json) -> tuple[str, str] | None:
    """The uid and resourceVersion: a version the cache may be sure of (None: validate)."""
    metadata = obj["metadata"]
    uid, version = metadata.get("uid"), metadata.get("resourceVersion")
    return (str(uid), str(version)) if uid and version else None
