"""Sandbox leases, their executions, and attach and port-forward sessions."""
