"""`python -m lessor.controlplane build|start|stop|env|status`: the local control plane by hand.

`start` leaves the cluster running in the background (processes in their own sessions, recorded
in the cluster directory) and prints the environment to use it; `stop` ends it and deletes it,
and first the `local` clusters an operator started for it (lessor.controlplane.local_clusters),
which would otherwise outlive it with nothing left to stop them.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from lessor.controlplane.binaries import cache_root, ensure_binaries, find_binaries
from lessor.controlplane.cluster import LocalControlPlane
from lessor.controlplane.errors import ControlPlaneError
from lessor.controlplane.local_clusters import default_root, stop_host_clusters


def default_directory() -> Path:
    explicit = os.environ.get("LESSOR_LOCALCP_DIR")
    return Path(explicit) if explicit else cache_root() / "clusters" / "default"


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _print_env(cluster: LocalControlPlane) -> None:
    state = cluster.state()
    assert state is not None
    print(f"KUBECONFIG={cluster.kubeconfig}")
    print(f"LESSOR_LOCALCP_BIN={state.binaries}")


def _stop_local_clusters(cluster: LocalControlPlane, root: Path) -> None:
    """Stop the `local` clusters of this host, found by its identity (its kube-system uid), which
    only a running host can tell; a host that does not answer leaves them to `gc`."""
    if not cluster.is_running():
        return
    found = cluster.kubectl(
        "get", "namespace", "kube-system", "-o", "jsonpath={.metadata.uid}", check=False
    )
    uid = found.stdout.strip()
    if found.returncode != 0 or not uid:
        _progress(
            "could not read the cluster's identity; its local clusters, if any, are left to "
            "`python -m lessor.controlplane.local_clusters gc`"
        )
        return
    stopped = stop_host_clusters(root, uid)
    if stopped:
        _progress(f"stopped {len(stopped)} local cluster(s) of this cluster in {root / uid}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lessor.controlplane",
        description="Build, start and stop a real Kubernetes control plane on loopback "
        "(etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok with one fake node).",
        epilog="Use it from a shell:  export $(python -m lessor.controlplane start)",
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=default_directory(),
        help="cluster directory (default: $LESSOR_LOCALCP_DIR or <cache>/clusters/default)",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("build", help="build the binaries into the cache if missing")
    commands.add_parser("start", help="start the cluster in the background; print its env")
    stop = commands.add_parser(
        "stop", help="stop the cluster's `local` clusters, then the cluster; delete its directory"
    )
    stop.add_argument(
        "--local-backend-dir",
        type=Path,
        default=default_root(),
        help="the operator's --local-backend-dir (default: $LESSOR_LOCAL_BACKEND_DIR or "
        "<cache>/instances)",
    )
    commands.add_parser("env", help="print KUBECONFIG=... for the running cluster")
    commands.add_parser("status", help="say whether the cluster runs; exit 1 if not")
    args = parser.parse_args(argv)
    cluster = LocalControlPlane(args.dir)
    try:
        if args.command == "build":
            print(ensure_binaries(_progress))
        elif args.command == "start":
            if cluster.is_running():
                _progress(f"already running in {cluster.directory}")
            else:
                cluster.destroy()  # a stale record from a crash or reboot: start afresh
                binaries = ensure_binaries(_progress)
                started = time.monotonic()
                cluster.start(binaries, detached=True, progress=_progress)
                _progress(f"started in {time.monotonic() - started:.1f}s")
            _print_env(cluster)
        elif args.command == "stop":
            _stop_local_clusters(cluster, args.local_backend_dir)
            cluster.destroy()
            _progress(f"stopped; removed {cluster.directory}")
        elif args.command == "env":
            if not cluster.is_running():
                raise ControlPlaneError(f"no running cluster in {cluster.directory}; run start")
            _print_env(cluster)
        elif args.command == "status":
            running = cluster.is_running()
            built = find_binaries()
            print(f"cluster: {'running' if running else 'stopped'} ({cluster.directory})")
            print(f"binaries: {built or 'not built'}")
            return 0 if running else 1
    except ControlPlaneError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
