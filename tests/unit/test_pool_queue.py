"""A pool's queue, as its pass counts it (queueDepth), the queue gauges show it, and a ready
instance is offered to it: the leases waiting for something, and only those."""

from __future__ import annotations

from typing import Any

import pytest

from lessor.operator.core.kinds import index_queue_of_pool


def lease(phase: str | None, *, deleting: bool = False, cancelled: bool = False) -> Any:
    metadata: dict[str, Any] = {"name": "l", "namespace": "team", "uid": "u"}
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-29T00:00:00Z"
    spec: dict[str, Any] = {"pool": "small"}
    if cancelled:
        spec["cancelled"] = True
    return {"metadata": metadata, "spec": spec, **({"status": {"phase": phase}} if phase else {})}


@pytest.mark.parametrize("phase", [None, "Pending"])
def test_a_lease_not_yet_given_anything_is_in_its_pools_queue(phase: str | None) -> None:
    assert list(index_queue_of_pool(lease(phase))) == ["team/small"]


@pytest.mark.parametrize("phase", ["Bound", "Provisioning", "Ready", "Released", "Expired"])
def test_a_lease_given_something_or_ended_is_not(phase: str) -> None:
    assert list(index_queue_of_pool(lease(phase))) == []


def test_a_waiting_lease_being_deleted_or_cancelled_is_not() -> None:
    assert list(index_queue_of_pool(lease("Pending", deleting=True))) == []
    assert list(index_queue_of_pool(lease(None, cancelled=True))) == []
