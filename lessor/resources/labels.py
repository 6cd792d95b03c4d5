"""Every `lessor.dev/` label and annotation key that more than one module reads or writes.

Both components select and stamp objects by these keys (the API server labels a lease with its
pool, the operator lists a pool's leases by it), so a key spelt twice is a selector that silently
matches nothing once one copy changes. A key private to one module stays beside its one use.
"""

from __future__ import annotations

from typing import Final

# On leases (ClusterLease, SandboxLease), written by the API server at creation.
POOL: Final = "lessor.dev/pool"  # a ClusterLease's pool and a ClusterInstance's pool
REQUESTER: Final = "lessor.dev/requester"
SANDBOX_POOL: Final = "lessor.dev/sandbox-pool"

# On what a lease owns or is owed.
LEASE: Final = "lessor.dev/lease"  # a lease's kubeconfig Secret and its client CSR
SANDBOX_LEASE: Final = "lessor.dev/sandbox-lease"  # a SandboxLease's executions and claims
SANDBOX_EXECUTION: Final = "lessor.dev/sandbox-execution"

# On what a ClusterInstance's backend creates (a label for selection, the annotation where the
# value is `namespace/name` and a label value cannot hold the `/`).
INSTANCE: Final = "lessor.dev/instance"
INSTANCE_UID: Final = "lessor.dev/instance-uid"

# Reservations: the ConfigMaps that bound a tenant's leases (apiserver/leases/reservations.py).
RESERVATION: Final = "lessor.dev/reservation"  # its value: [sandbox-](slot|alias)
HOLDER: Final = "lessor.dev/holder"
RESERVATIONS: Final = "lessor.dev/reservations"  # annotation on the lease: the names it holds
