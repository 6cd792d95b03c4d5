"""Objects of one kind in the service namespace, kept in memory by a list and a watch.

Why: a client waiting for its lease polls it (spec 4.1), and every poll answered with a GET on
kube-apiserver cost that server, and this one, a full round trip with the kubernetes client's
serialization: the profile of issue 19 (bench/results/profile-2026-11-25.md) found a third of
the API server's CPU there. Reads that may lag the cluster by the few milliseconds a watch
event takes are served from here; what is not here is read from kube-apiserver, so a cache
miss is never an answer (a lease created a moment ago by another replica is found).

Read-your-writes within a process: a write this process made (`wrote`) makes the object
"unseen" until the watch delivers that version, and `get` does not answer for it until then
(`read` goes to kube-apiserver); a caller never sees its own write undone. Another worker's or
replica's write is seen when its watch event arrives, as with any Kubernetes client reading
from a cache; what the API shows of a lease after its create is the operator's (phase, expiry),
which is as late for every reader.

One background thread (a greenlet under gunicorn's gevent workers) lists, then watches from the
list's resourceVersion, resumes from the last version seen when the watch ends, and relists
after a failure with a backoff; each change replaces the object, so a reader never sees half of
one. Until the first list has arrived, and from a failure until the next list, every read goes
to kube-apiserver.

A request may also wait for the next change of one object (`changes`): a long poll of a lease
costs a greenlet and an Event, not a round trip every few milliseconds (issue 19).

A field selector keeps what nobody reads often out of memory (ended leases: a day of CI history
may be 100,000 of them, issue 45). An object that stops matching arrives as a deletion, so the
cache holds exactly the matching objects; a read of another object goes to kube-apiserver. A
CRD installed without the selectable field (an upgrade that kept the old CRDs) refuses the
selector: the watch then takes every object, as before, and says so once.

An index (`index`: one value per object, e.g. its requester's label) answers "the objects of
this value" without a pass over all of them: a caller's leases from the watch (issue 45).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import cachetools
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from lessor.apiserver.state.kube import TIMEOUT, Kube
from lessor.protocol.backoff import Backoff
from lessor.protocol.json_object import Json
from lessor.resources.base import GROUP, VERSION

log = logging.getLogger(__name__)
# After a failed list or watch: 0.25-0.5 s, doubling up to 15-30 s; reset by a good watch.
RELIST_BACKOFF = Backoff(first=0.5, cap=30.0, jitter=0.5)
# How long an own write may stay unseen before the watch is assumed to have skipped it (a
# relist in between shows a later version, never that one): reads go to kube-apiserver meanwhile.
UNSEEN_FOR = 30.0
# While the watch is down, a read from kube-apiserver answers every reader of that object in
# this process for this long: the waiters of one lease (long polls read it every second) share
# one read, instead of each adding one to a kube-apiserver that may be why the watch is down.
SHARED_FOR = 1.0


class WatchedObjects:
    """`on_change`: called with every object (by name) after each change, in the watching
    thread; what the AccessPolicy store builds its snapshot from."""

    def __init__(
        self,
        kube_factory: Callable[[], Kube],
        plural: str,
        on_change: Callable[[Mapping[str, Json]], None] | None = None,
        *,
        field_selector: str = "",
        index: Callable[[Json], str | None] | None = None,
    ) -> None:
        self._kube_factory = kube_factory
        self.plural = plural
        self._on_change = on_change
        self._field_selector = field_selector
        self._index = index
        self._indexed: dict[str, set[str]] = {}
        self._objects: dict[str, Json] = {}
        self._synced = threading.Event()
        # name -> (version, index value, object) of an own write the watch has not delivered yet
        self._unseen: cachetools.TTLCache[str, tuple[str, str | None, Json]] = cachetools.TTLCache(
            10_000, UNSEEN_FOR
        )
        # (name, version) the watch delivered lately: a write whose answer comes back after
        # its own watch event (and a later one's) is not unseen. Versions are compared for
        # equality only, as the API conventions allow.
        self._delivered: cachetools.TTLCache[tuple[str, str], bool] = cachetools.TTLCache(
            10_000, UNSEEN_FOR
        )
        self._shared: cachetools.TTLCache[str, Json] = cachetools.TTLCache(10_000, SHARED_FOR)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._waiters: dict[str, set[threading.Event]] = {}

    # -- reading ---------------------------------------------------------------------------

    def synced(self, timeout: float = 0.0) -> bool:
        """Whether the first list arrived (started on first use), waiting up to `timeout`."""
        self._start()
        return self._synced.wait(timeout) if timeout else self._synced.is_set()

    def get(self, name: str) -> Json | None:
        """The object as last seen, or None: not here (it may still exist; read it)."""
        if not self.synced():
            return None
        with self._lock:
            return None if name in self._unseen else self._objects.get(name)

    def read(self, name: str) -> Json | None:
        """The object as last seen, else as kube-apiserver has it; None: it does not exist.
        While the watch is down, what kube-apiserver said is shared for SHARED_FOR seconds (not
        an own write's object: that one is read again)."""
        found = self.get(name)
        if found is not None:
            return found
        shares = not self.synced()
        with self._lock:
            shared = self._shared.get(name) if shares and name not in self._unseen else None
        if shared is not None:
            return shared
        found = self._kube_factory().find(self.plural, name)
        if found is not None and shares:
            with self._lock:
                self._shared[name] = found
        return found

    def indexed(self, value: str, *, with_unseen: bool = False) -> list[Json] | None:
        """The objects whose index value is `value`, as last seen; None when this process
        cannot vouch for them (not synced yet, or one of them was written here and its watch
        event has not come back: the caller reads kube-apiserver then, which has it).

        `with_unseen`: an own write not yet seen is answered as kube-apiserver answered it,
        instead of None. For a hint that a refused write corrects (the slot a create tries
        first: issue 45), not for an answer: another writer may have changed it since."""
        if not self.synced():
            return None
        with self._lock:
            unseen = {n: obj for n, (_, v, obj) in self._unseen.items() if v == value}
            if unseen and not with_unseen:
                return None
            seen = self._indexed.get(value, set()) - self._unseen.keys()
            return [self._objects[name] for name in seen] + list(unseen.values())

    def listed(self) -> list[Json]:
        """Every object as last seen, or from kube-apiserver's own cache until the first list
        arrived here."""
        if self.synced():
            with self._lock:
                return list(self._objects.values())
        return self._kube_factory().list_objects(self.plural, cached=True)

    def wrote(self, obj: Json) -> None:
        """Record a write of this process (the object kube-apiserver answered with): unseen
        until the watch delivers that version. A version it delivered already is not: an answer
        can come back after its own watch event and a later one's (the operator binds a lease
        within milliseconds of its create), and waiting for that version would send every read
        of the object to kube-apiserver for UNSEEN_FOR."""
        metadata = obj["metadata"]
        name, version = metadata["name"], metadata["resourceVersion"]
        with self._lock:
            self._shared.pop(name, None)
            current = self._objects.get(name)
            seen = current is not None and current["metadata"]["resourceVersion"] == version
            if not seen and (name, version) not in self._delivered:
                self._unseen[name] = (version, self._value_of(obj), obj)

    @contextmanager
    def changes(self, name: str) -> Iterator[threading.Event]:
        """An Event set at every change of the object `name` seen from here on (and at every
        relist or failure of the watch, when anything may have changed); the waiter clears it
        before it reads again, so a change between its read and its wait is never missed."""
        changed = threading.Event()
        with self._lock:
            self._waiters.setdefault(name, set()).add(changed)
        try:
            yield changed
        finally:
            with self._lock:
                waiting = self._waiters.get(name)
                if waiting is not None:
                    waiting.discard(changed)
                    if not waiting:
                        del self._waiters[name]

    def _wake(self, name: str | None) -> None:
        """Set the Events of those waiting on `name` (None: on any object)."""
        with self._lock:
            if name is None:
                events = [e for waiting in self._waiters.values() for e in waiting]
            else:
                events = list(self._waiters.get(name, ()))
        for event in events:
            event.set()

    # -- keeping it current ------------------------------------------------------------------

    def _start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            with self._lock:
                if self._thread is None or not self._thread.is_alive():
                    self._thread = threading.Thread(
                        target=self._run, name=f"watch-{self.plural}", daemon=True
                    )
                    self._thread.start()

    def _run(self) -> None:
        failures = 0
        while True:
            try:
                version = self._list()
                while True:  # a watch that ends in time is resumed where it stopped
                    version = self._watch(version)
                    failures = 0
            except Exception as error:
                # Until a list succeeds again, nothing here is vouched for: reads go to
                # kube-apiserver (a watch refused, say by a Role without `watch`, would
                # otherwise serve the last list for as long as the backoff).
                self._synced.clear()
                self._wake(None)  # waiters read kube-apiserver until the next list
                delay = RELIST_BACKOFF.delay(failures)
                log.warning("%s: %s; relisting in %.1fs", self.plural, error, delay)
                time.sleep(delay)
                failures += 1

    def _list(self) -> str:
        kube = self._kube_factory()
        try:
            listed: dict[str, Any] = kube.custom.list_namespaced_custom_object(  # type: ignore[assignment]
                GROUP,
                VERSION,
                kube.namespace,
                self.plural,
                field_selector=self._field_selector,
                _request_timeout=TIMEOUT * 3,
            )
        except ApiException as error:
            if error.status != 400 or not self._field_selector:
                raise
            log.warning(
                "%s: the CRD does not let a watch select %r (re-apply this version's CRDs);"
                " watching every object",
                self.plural,
                self._field_selector,
            )
            self._field_selector = ""
            return self._list()
        objects = {item["metadata"]["name"]: item for item in listed.get("items", [])}
        indexed: dict[str, set[str]] = {}
        for name, item in objects.items():
            if (value := self._value_of(item)) is not None:
                indexed.setdefault(value, set()).add(name)
        with self._lock:
            self._objects, self._indexed = objects, indexed
            self._unseen.clear()  # a consistent list holds every write that returned before it
        self._changed()
        self._synced.set()
        self._wake(None)
        return str(listed["metadata"]["resourceVersion"])

    def _watch(self, version: str) -> str:
        kube = self._kube_factory()
        stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
            kube.custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            kube.namespace,
            self.plural,
            resource_version=version,
            field_selector=self._field_selector,
            allow_watch_bookmarks=True,
            timeout_seconds=random.randint(300, 600),  # noqa: S311 - spread reconnections
            _request_timeout=660,
        )
        for event in stream:
            kind, obj = event["type"], event["raw_object"]
            if kind == "ERROR":  # 410 Gone among them: relist
                raise RuntimeError(f"watch error: {obj.get('message')}")
            metadata = obj["metadata"]
            version = metadata["resourceVersion"]
            if kind == "BOOKMARK":
                continue
            name = metadata["name"]
            with self._lock:
                self._delivered[(name, version)] = True
                self._unindex(name)
                if kind == "DELETED":
                    self._objects.pop(name, None)
                else:
                    self._objects[name] = obj
                    if (value := self._value_of(obj)) is not None:
                        self._indexed.setdefault(value, set()).add(name)
                if kind == "DELETED" or self._unseen.get(name, ("",))[0] == version:
                    self._unseen.pop(name, None)
            self._changed()
            self._wake(name)
        return version

    def _value_of(self, obj: Json) -> str | None:
        return self._index(obj) if self._index is not None else None

    def _unindex(self, name: str) -> None:
        """Drop `name` from the index (under the lock), as its object was last seen."""
        old = self._objects.get(name)
        value = self._value_of(old) if old is not None else None
        if value is not None and (names := self._indexed.get(value)) is not None:
            names.discard(name)
            if not names:
                del self._indexed[value]

    def _changed(self) -> None:
        if self._on_change is not None:
            with self._lock:
                objects = dict(self._objects)
            self._on_change(objects)
