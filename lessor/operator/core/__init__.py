"""What every reconciler shares and the backends and diagnostics build on: fenced writes, the
kinds' informer handles, conditions and readiness, ownership, and the metrics and trace spans
of both kinds of lease. It imports nothing of the operator above the controller runtime."""
