"""A controller runtime in the manner of client-go and controller-runtime, on kr8s's raw API."""
