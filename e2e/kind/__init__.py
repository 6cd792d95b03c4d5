"""Real kind clusters on this project's machines: docker, a node image built offline, kind itself.

No container registry is reachable from these machines, and their capability bounding set lacks
CAP_SYS_RESOURCE, so neither docker's defaults nor kind's published images work here as shipped.
This package sets docker up so privileged containers run, and builds every image kind needs from
Debian packages and pinned Go modules.
"""
