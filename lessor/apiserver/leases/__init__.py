"""Cluster leases, pools, and the ceilings that span API replicas."""
