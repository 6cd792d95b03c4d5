"""The reconcilers of ephemeral clusters: ClusterPools, their ClusterInstances and the
ClusterLeases bound to them, with the pool's rollout and autoscaling and the sweeps of what a
crash left behind."""
