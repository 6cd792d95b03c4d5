"""What `lessor.operator.main` assembles and hands to each controller's `setup`: the operator's
settings and the shared context (client, informers, backends, event recorder)."""
