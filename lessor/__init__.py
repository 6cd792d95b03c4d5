"""lessor: time-limited leases on ephemeral Kubernetes clusters and agent sandboxes."""

__version__ = "0.2.0"
