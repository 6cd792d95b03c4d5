"""Preparing a new cluster before it is warm: its pool's addons applied and its readiness gates
passed (issue 46; the pool's side is lessor.resources.addons)."""
