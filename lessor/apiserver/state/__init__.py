"""Where the stateless API server keeps state: the Kubernetes API and the replica's files."""
