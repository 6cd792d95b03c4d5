"""A lease addressed by its alias where its id goes (`/v1/leases/<alias>`, spec 7.2's
`ambiguous_alias`).

An alias is unique among its owner's *active* leases, so it names one of them; once that one has
ended, the name may be given again, and an alias can name several ended leases of one owner. A
path segment of an id's form is an id (no alias may take that form); any other is looked up among
the caller's own leases: the active one of that alias, else the only ended one; several (ended
ones, or active ones that a race let through) are 409 `ambiguous_alias`, "disambiguate first":
the listing shows their ids.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from lessor.apiserver.http.errors import HttpConflictError
from lessor.resources.cluster import ClusterLease
from lessor.resources.sandbox import SandboxLease

LeaseT = TypeVar("LeaseT", ClusterLease, SandboxLease)


def by_alias(
    leases: list[LeaseT], alias: str, active: Callable[[str | None], bool]
) -> LeaseT | None:
    """The one lease of `leases` (the caller's own) that `alias` names; None if none does."""
    named = [lease for lease in leases if lease.spec.alias == alias]
    live = [lease for lease in named if active(lease.status.phase if lease.status else None)]
    chosen = live or named
    if len(chosen) > 1:
        ids = ", ".join(sorted(lease.metadata.name or "" for lease in chosen))
        raise HttpConflictError(
            f"{len(chosen)} of your leases are named {alias} ({ids}); use the id",
            reason="ambiguous_alias",
        )
    return chosen[0] if chosen else None
