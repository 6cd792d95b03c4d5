"""A pool's roll to a new template (lessor.operator.cluster.rollout.plan), pass after pass,
against a small simulation of its clusters: a new cluster starts at one pass and is ready at the
next; a lease takes a ready cluster. What a user would notice is asserted: warm clusters never fewer
than before the change (with room to surge), every warm cluster new at the end, a leased one
never touched, no cluster retired while leases wait."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
from typing import Any

from lessor.operator.cluster.rollout import plan, template_hash
from lessor.operator.core.typed import Cached
from lessor.resources.cluster import Backend, ClusterInstance, ClusterPoolSpec

OLD: dict[str, Any] = {"type": "k3s", "k3s": {"image": "rancher/k3s:v1.34.1-k3s1"}}
NEW: dict[str, Any] = {"type": "k3s", "k3s": {"image": "rancher/k3s:v1.35.4-k3s1"}}
_names = itertools.count()


def _instance(
    backend: dict[str, Any], phase: str | None, lease: str | None = None, **template: Any
) -> Any:
    n = next(_names)
    spec: dict[str, Any] = {"pool": "p", "backend": backend, **template}
    if lease:
        spec["claimRef"] = {"name": lease, "uid": lease}
    return {
        "metadata": {"name": f"p-{n}", "namespace": "ns", "uid": f"u{n}", "resourceVersion": "1"},
        "spec": spec,
        "status": {"phase": phase} if phase else {},
    }


def _ready(instances: list[Any]) -> list[Any]:
    return [
        i for i in instances if i["status"].get("phase") == "Ready" and "claimRef" not in i["spec"]
    ]


def _roll(
    spec: ClusterPoolSpec, instances: list[Any], waiting: int = 0, passes: int = 30
) -> list[int]:
    """Passes until nothing changes; the warm (ready, unleased) count after each."""
    warm_counts = []
    for _ in range(passes):
        for i in instances:  # what started at the last pass is ready now
            if i["status"].get("phase") == "Creating":
                i["status"]["phase"] = "Ready"
        decided = _plan(spec, instances, waiting=waiting)
        retired = {id(i) for i in decided.retire}
        instances[:] = [i for i in instances if id(i) not in retired]
        instances += [_instance(NEW, "Creating") for _ in range(decided.create)]
        warm_counts.append(len(_ready(instances)))
        if not decided.create and not decided.retire:
            break
    return warm_counts


def _plan(spec: ClusterPoolSpec, instances: list[Any], **given: Any) -> Any:
    """A pass with nothing created unseen, every cluster counted against maxInstances; the
    clusters to retire given back as the simulation's own objects."""
    arguments = {"expected": 0, "occupied": len(instances), "waiting": 0,
                 "warm": spec.warm_target, **given}  # fmt: skip
    cached = [Cached(i, ClusterInstance.model_validate(i)) for i in instances]
    decided = plan(spec, cached, **arguments)
    return dataclasses.replace(decided, retire=[c.raw for c in decided.retire])


def _spec(**fields: Any) -> ClusterPoolSpec:
    return ClusterPoolSpec.model_validate({"backend": NEW, **fields})


def test_a_roll_replaces_every_warm_cluster_and_never_has_fewer_ready() -> None:
    leased = _instance(OLD, "Leased", lease="l1")
    instances = [_instance(OLD, "Ready") for _ in range(3)] + [leased]
    counts = _roll(_spec(warmTarget=3), instances)
    assert min(counts) >= 3, counts
    warm = _ready(instances)
    assert len(warm) == 3 and all(i["spec"]["backend"] == NEW for i in warm)
    assert leased in instances and leased["spec"]["backend"] == OLD, "a tenant's cluster stays"
    assert len(instances) == 4


def test_the_surge_bounds_how_many_new_clusters_start_at_once() -> None:
    instances = [_instance(OLD, "Ready") for _ in range(4)]
    first = _plan(_spec(warmTarget=4, policy={"maxSurge": 2}), instances)
    assert (first.create, first.retire, first.outdated) == (2, [], 4)


def test_a_full_pool_retires_one_old_cluster_at_a_time_to_make_room() -> None:
    instances = [_instance(OLD, "Ready") for _ in range(2)]
    counts = _roll(_spec(warmTarget=2, maxInstances=2), instances)
    assert min(counts) >= 1, counts  # one cluster less for a moment, never more
    assert [i["spec"]["backend"] for i in _ready(instances)] == [NEW, NEW]


def test_nothing_is_retired_while_leases_wait_for_a_cluster() -> None:
    instances = [_instance(OLD, "Ready"), _instance(NEW, "Ready"), _instance(NEW, "Ready")]
    assert _plan(_spec(warmTarget=2), instances, waiting=1).retire == []
    assert _plan(_spec(warmTarget=2), instances).retire == [instances[0]]


def test_a_pool_that_cannot_create_retires_nothing() -> None:
    instances = [_instance(OLD, "Ready") for _ in range(2)]
    decided = _plan(_spec(warmTarget=2, maxInstances=2), instances, can_create=False)
    assert (decided.create, decided.retire) == (0, [])


def test_defaults_count_as_part_of_the_template() -> None:
    """A pool that spells out a default has the template of one that leaves it out; a new
    default in a new lessor is a new template (its clusters would differ)."""
    spelled = {"type": "k3s", "k3s": {"image": Backend.model_validate(NEW).k3s.image}}  # type: ignore[union-attr]
    assert template_hash(_spec(backend=spelled)) == template_hash(
        _spec(backend={"type": "k3s", "k3s": {}})
    )
    instances = [_instance({"type": "k3s"}, "Ready")]
    assert _plan(_spec(warmTarget=1, backend={"type": "k3s"}), instances).outdated == 0


def test_a_pool_without_addons_keeps_the_hash_it_had_before_there_were_any() -> None:
    """Upgrading lessor must roll no pool: the template of a pool without addons or gates is its
    backend, digested as before (this digest is what 0.1 wrote into the status)."""
    canonical = json.dumps(
        Backend.model_validate(NEW).model_dump(mode="json", by_alias=True, exclude_none=True),
        sort_keys=True,
        separators=(",", ":"),
    )
    assert template_hash(_spec()) == hashlib.sha256(canonical.encode()).hexdigest()[:10]


def test_a_change_of_addons_or_gates_rolls_the_warm_clusters() -> None:
    addon = {"name": "base", "manifests": "kind: Namespace"}
    before = [_instance(NEW, "Ready") for _ in range(2)]
    with_addon = _spec(warmTarget=2, addons=[addon])
    assert _plan(with_addon, before).outdated == 2
    now = [_instance(NEW, "Ready", addons=[addon]) for _ in range(2)]
    assert _plan(with_addon, now).outdated == 0
    gated = _spec(warmTarget=2, addons=[addon], readinessGates={"crdsEstablished": ["a.b.c"]})
    assert _plan(gated, now).outdated == 2


def test_a_lowered_target_retires_the_newest_idle_clusters_and_no_leased_one() -> None:
    leased = _instance(NEW, "Leased", lease="l1")
    warm = [_instance(NEW, "Ready") for _ in range(4)]
    for n, instance in enumerate(warm):
        instance["metadata"]["creationTimestamp"] = f"2026-11-26T09:0{n}:00Z"
    decided = _plan(_spec(warmTarget=4), [*warm, leased], warm=1)
    assert decided.retire == [warm[3], warm[2], warm[1]]
    assert (decided.create, _plan(_spec(), [*warm, leased], warm=1, waiting=2).retire) == (0, [])
