"""The informer's cache: objects by `namespace/name`, with indexes, and change notifications.

Reconcilers read from here, never from the API server, so a reconcile costs no round trip and
sees one consistent snapshot per kind; what they write comes back through the watch.
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from lessor.protocol.json_object import Json

log = logging.getLogger(__name__)

IndexFunc = Callable[[Json], Iterable[str]]


def key_of(obj: Json) -> str:
    metadata = obj["metadata"]
    namespace = metadata.get("namespace")
    return f"{namespace}/{metadata['name']}" if namespace else str(metadata["name"])


def version_of(obj: Json) -> tuple[str, str] | None:
    """The object's uid and resourceVersion: one version of one object, never reused (None for
    an object kube-apiserver has not stored, which has neither)."""
    metadata = obj["metadata"]
    uid, version = metadata.get("uid"), metadata.get("resourceVersion")
    return (str(uid), str(version)) if uid and version else None


@dataclass(frozen=True)
class Handler:
    on_add: Callable[[Json], None] | None = None
    on_update: Callable[[Json, Json], None] | None = None
    on_delete: Callable[[Json], None] | None = None


class Store:
    def __init__(self, indexers: dict[str, IndexFunc] | None = None) -> None:
        self._items: dict[str, Json] = {}
        self._indexers = dict(indexers or {})
        self._indices: dict[str, dict[str, set[str]]] = {name: {} for name in self._indexers}
        self._handlers: list[Handler] = []
        self.has_synced = False

    def add_handler(self, handler: Handler) -> None:
        """Handlers also receive every object already cached, as adds, like client-go's."""
        self._handlers.append(handler)
        if handler.on_add:
            for obj in list(self._items.values()):
                handler.on_add(obj)

    def add_indexer(self, name: str, function: IndexFunc) -> None:
        """Index by `function` too, under `name`; a name already indexed is kept as it is, so
        that every controller sharing this cache can ask for the indexes it reads."""
        if name in self._indexers:
            return
        self._indexers[name] = function
        self._indices[name] = {}
        for key, obj in self._items.items():
            for value in function(obj):
                self._indices[name].setdefault(value, set()).add(key)

    def get(self, key: str) -> Json | None:
        return self._items.get(key)

    def list(self) -> builtins.list[Json]:
        return list(self._items.values())

    def by_index(self, index: str, value: str) -> builtins.list[Json]:
        return [self._items[k] for k in sorted(self._indices[index].get(value, ()))]

    def upsert(self, obj: Json) -> None:
        key = key_of(obj)
        old = self._items.get(key)
        self._unindex(key, old)
        self._items[key] = obj
        self._index(key, obj)
        for handler in self._handlers:
            if old is None and handler.on_add:
                _safely(handler.on_add, obj)
            elif old is not None and handler.on_update:
                _safely(handler.on_update, old, obj)

    def remove(self, obj: Json) -> None:
        key = key_of(obj)
        old = self._items.pop(key, None)
        self._unindex(key, old)
        for handler in self._handlers:
            if handler.on_delete:
                _safely(handler.on_delete, old or obj)

    def replace(self, objects: builtins.list[Json]) -> None:
        """A relist: objects that vanished while we were not watching are reported as deleted."""
        fresh = {key_of(obj): obj for obj in objects}
        for key, old in list(self._items.items()):
            if key not in fresh:
                self.remove(old)
        for obj in objects:
            current = self._items.get(key_of(obj))
            if current is None or _version(current) != _version(obj):
                self.upsert(obj)
        self.has_synced = True

    def _index(self, key: str, obj: Json) -> None:
        for name, function in self._indexers.items():
            for value in function(obj):
                self._indices[name].setdefault(value, set()).add(key)

    def _unindex(self, key: str, obj: Json | None) -> None:
        if obj is None:
            return
        for name, function in self._indexers.items():
            for value in function(obj):
                keys = self._indices[name].get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del self._indices[name][value]


def _version(obj: Json) -> str:
    return str(obj["metadata"].get("resourceVersion", ""))


def _safely(function: Callable[..., None], *args: Json) -> None:
    try:
        function(*args)
    except Exception:
        log.exception("event handler failed")
