"""The API server's watch of leases against the real API server: its index by requester, its
field selector, and read-your-writes for a write the watch has not delivered.

A write the watch never delivers is made for real: the watch selects `metadata.name!=hidden`,
and the test writes the lease named `hidden`."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest

from lessor.apiserver.state.kube import Kube
from lessor.apiserver.state.watched import WatchedObjects
from lessor.controlplane.kubectl import Cluster
from lessor.protocol.json_object import Json
from lessor.resources.cluster import ClusterLease

pytestmark = pytest.mark.integration
REQUESTER = "lessor.dev/requester"


def lease(name: str, requester: str) -> Json:
    return {
        "apiVersion": "lessor.dev/v1alpha1",
        "kind": "ClusterLease",
        "metadata": {"name": name, "labels": {REQUESTER: requester}},
        "spec": {"pool": "p", "ttl": "1h", "requester": requester},
    }


def names(objects: list[Json] | None) -> set[str] | None:
    return None if objects is None else {o["metadata"]["name"] for o in objects}


def eventually(probe: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_an_own_write_not_yet_seen_is_vouched_for_only_as_a_hint(cluster: Cluster) -> None:
    """A caller's list is served from the index once the watch has its objects. An own create
    that the watch has not delivered makes the index refuse to answer (the caller then reads
    kube-apiserver), unless the caller asks for a hint, which then includes that create as
    kube-apiserver answered it: the slot a create tries first (issue 45)."""
    namespace = f"wo-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", namespace)
    kube = Kube(str(cluster.kubeconfig), namespace)
    plural = ClusterLease.crd.plural
    watched = WatchedObjects(
        lambda: kube,
        plural,
        field_selector="metadata.name!=hidden",
        index=lambda o: o["metadata"].get("labels", {}).get(REQUESTER),
    )
    try:
        assert watched.synced(timeout=30)
        assert watched.indexed("alice") == []

        seen = kube.create(plural, lease("seen", "alice"))
        watched.wrote(seen)
        kube.create(plural, lease("bobs", "bob"))
        eventually(lambda: names(watched.indexed("bob")) == {"bobs"})  # delivered after alice's
        assert names(watched.indexed("alice")) == {"seen"}

        hidden = kube.create(plural, lease("hidden", "alice"))
        watched.wrote(hidden)
        time.sleep(0.5)  # time enough for a watch event that will never come
        assert watched.indexed("alice") is None, "an unseen own write is not vouched for"
        assert names(watched.indexed("alice", with_unseen=True)) == {"seen", "hidden"}
        assert names(watched.indexed("bob")) == {"bobs"}, "bob's list has no unseen write"
        assert watched.get("hidden") is None
        assert watched.read("hidden") is not None, "read goes to kube-apiserver"
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false")


def test_a_write_answered_after_its_watch_event_and_a_later_one_is_seen(cluster: Cluster) -> None:
    """The operator binds a warm lease within milliseconds of its create: the watch can deliver
    the create and the bind before the worker that created the lease handles the create's
    answer. That version is then not awaited (it will never come again): the lease is served
    from the watch at once, not read from kube-apiserver for 30 s (issue 45)."""
    namespace = f"wo-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", namespace)
    kube = Kube(str(cluster.kubeconfig), namespace)
    plural = ClusterLease.crd.plural
    watched = WatchedObjects(
        lambda: kube, plural, index=lambda o: o["metadata"].get("labels", {}).get(REQUESTER)
    )
    try:
        assert watched.synced(timeout=30)
        created = kube.create(plural, lease("late", "carol"))
        changed = kube.json_patch(
            plural, "late", [{"op": "add", "path": "/spec/ttl", "value": "2h"}]
        )
        later = changed["metadata"]["resourceVersion"]
        eventually(
            lambda: (
                (watched.get("late") or {"metadata": {}})["metadata"].get("resourceVersion")
                == later
            )
        )
        watched.wrote(created)  # the create's answer, handled only now
        assert watched.get("late") is not None, "the lease is read from kube-apiserver"
        assert names(watched.indexed("carol")) == {"late"}
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false")
