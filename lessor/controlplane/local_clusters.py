"""Where the operator's `local` clusters live, keyed by their host cluster, and how they end.

A `local` cluster's processes outlive the operator that started them, so that a restarted operator
re-adopts them; once their host cluster (where their ClusterInstances lived) is gone, nothing
would ever adopt or stop them. So each cluster lives under the directory of its host, named by
the uid of the host's `kube-system` namespace (the usual identity of a cluster):

    <root>/<host-uid>/host.json                  the host's API server URL and CA
    <root>/<host-uid>/<ns>_<name>_<uid>/         one cluster (lessor.controlplane.cluster)

and whoever ends the host, or finds it gone, can end every cluster of it: `python -m
lessor.controlplane stop` (the host's own uid), the operator (orphans of its live host, by
ClusterInstance uid) and `python -m lessor.controlplane.local_clusters gc` (hosts that no longer
answer). Directories of the layout before hosts (`<root>/<ns>_<name>_<uid>`) belong to no known
host; `gc` stops them only when asked.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import ssl
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from lessor.controlplane.binaries import cache_root
from lessor.controlplane.cluster import LocalControlPlane
from lessor.controlplane.errors import ControlPlaneError
from lessor.controlplane.processes import stop_processes_mentioning

HOST_FILE = "host.json"


def default_root() -> Path:
    """The operator's default `--local-backend-dir`; `stop` and `gc` must look in the same place."""
    explicit = os.environ.get("LESSOR_LOCAL_BACKEND_DIR")
    return Path(explicit) if explicit else cache_root() / "instances"


@dataclass(frozen=True)
class Host:
    """A host cluster: what names its directory (uid) and what tells whether it still lives."""

    uid: str
    server: str
    # PEM of the CA that verifies `server`; None: the system's trust store.
    ca_pem: bytes | None = None

    def to_json(self) -> str:
        ca = base64.b64encode(self.ca_pem).decode() if self.ca_pem else None
        return json.dumps({"uid": self.uid, "server": self.server, "ca": ca}, indent=2)

    @classmethod
    def from_json(cls, text: str) -> Host:
        document = json.loads(text)
        ca = document.get("ca")
        return cls(
            str(document["uid"]), str(document["server"]), base64.b64decode(ca) if ca else None
        )


def host_directory(root: Path, uid: str) -> Path:
    return root / uid


def record_host(root: Path, host: Host) -> None:
    """Write `host.json` (atomically: a crash never leaves half a record that gc cannot read)."""
    directory = host_directory(root, host.uid)
    path = directory / HOST_FILE
    text = host.to_json()
    if path.exists() and path.read_text() == text:
        return
    directory.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(f".tmp.{os.getpid()}")
    temporary.write_text(text)
    temporary.replace(path)


def read_host(directory: Path) -> Host | None:
    """The host recorded in a host directory; None if it has no readable record."""
    try:
        return Host.from_json((directory / HOST_FILE).read_text())
    except (OSError, ValueError, KeyError):
        return None


def is_cluster_name(name: str) -> bool:
    """`<ns>_<name>_<uid>`: Kubernetes names never hold "_", so exactly two mark a cluster."""
    return name.count("_") == 2


def cluster_directories(directory: Path) -> list[Path]:
    """The clusters directly under `directory` (a host's directory)."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if p.is_dir() and is_cluster_name(p.name))


def every_cluster(root: Path) -> list[Path]:
    """Every cluster under `root`, of any host or of none (the layout before hosts): what a test
    or a demo that owns the whole root stops when it ends."""
    if not root.is_dir():
        return []
    found: list[Path] = []
    for entry in sorted(p for p in root.iterdir() if p.is_dir()):
        found += [entry] if is_cluster_name(entry.name) else cluster_directories(entry)
    return found


def stop_cluster(directory: Path) -> None:
    """Stop a cluster's processes and delete its directory; safe to repeat after any crash (a
    directory without a record is only deleted). Processes are stopped by their record, then
    hunted by command line: one started by an operator killed before it recorded it is in no
    record, yet names the directory."""
    LocalControlPlane(directory).destroy()
    stop_processes_mentioning(str(directory))


def stop_host_clusters(root: Path, uid: str) -> list[Path]:
    """Stop every cluster of host `uid` and delete the host's directory; the clusters stopped."""
    directory = host_directory(root, uid)
    clusters = cluster_directories(directory)
    for cluster in clusters:
        stop_cluster(cluster)
    # A cluster an operator started meanwhile keeps its host's record, so gc can still end it.
    if not cluster_directories(directory):
        shutil.rmtree(directory, ignore_errors=True)
    return clusters


def host_answers(host: Host, timeout: float = 3.0) -> bool:
    """Whether the host's API server answers at all: any HTTP status (401, 403 included) means it
    lives. TLS is verified with the recorded CA, so another server on a reused port is not
    mistaken for it."""
    url = f"{host.server.rstrip('/')}/version"
    if not url.startswith(("https://", "http://")):
        return False
    context = ssl.create_default_context(cadata=host.ca_pem.decode() if host.ca_pem else None)
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context):  # noqa: S310
            return True
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False


@dataclass(frozen=True)
class Finding:
    """One directory `gc` looked at and what it did with it."""

    directory: Path
    host: str | None  # the host's uid; None for the layout without hosts
    server: str | None
    verdict: str  # "answers", "gone" or "unknown host"
    clusters: list[Path]
    action: str  # "kept", "stopped", "would stop"

    def as_json(self) -> dict[str, object]:
        return {
            "directory": str(self.directory),
            "host": self.host,
            "server": self.server,
            "verdict": self.verdict,
            "clusters": [str(c) for c in self.clusters],
            "action": self.action,
        }

    def describe(self) -> str:
        count = f"{len(self.clusters)} cluster(s)"
        if self.verdict == "answers":
            return (
                f"host {self.host} ({self.server}) still answers; its operator collects its "
                f"orphans: kept {count} in {self.directory}"
            )
        what = f"host {self.host} is gone" if self.verdict == "gone" else "unknown host"
        if self.action == "kept":
            return f"{what}: kept {count} in {self.directory} (--include-unknown-host stops them)"
        return f"{what}: {self.action} {count} in {self.directory}"


def collect(
    root: Path, *, dry_run: bool = False, include_unknown_host: bool = False
) -> list[Finding]:
    """Stop the clusters of every host that no longer answers (and, if asked, of unknown hosts)."""
    findings: list[Finding] = []
    if not root.is_dir():
        return findings
    verb = "would stop" if dry_run else "stopped"
    for entry in sorted(p for p in root.iterdir() if p.is_dir()):
        if is_cluster_name(entry.name):
            action = verb if include_unknown_host else "kept"
            if action == "stopped":
                stop_cluster(entry)
            findings.append(Finding(entry, None, None, "unknown host", [entry], action))
            continue
        host = read_host(entry)
        clusters = cluster_directories(entry)
        if host is None:
            # A host directory whose record is missing: nobody can tell whether it lives.
            action = verb if include_unknown_host else "kept"
            if action == "stopped":
                stop_host_clusters(root, entry.name)
            findings.append(Finding(entry, entry.name, None, "unknown host", clusters, action))
        elif host_answers(host):
            findings.append(Finding(entry, host.uid, host.server, "answers", clusters, "kept"))
        else:
            if not dry_run:
                stop_host_clusters(root, entry.name)
            findings.append(Finding(entry, host.uid, host.server, "gone", clusters, verb))
    return findings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lessor.controlplane.local_clusters",
        description="Find and stop the `local` backend's clusters whose host cluster is gone.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    gc = commands.add_parser(
        "gc",
        help="stop the clusters of every host that no longer answers; never those of a live host",
    )
    gc.add_argument(
        "--local-backend-dir",
        type=Path,
        default=default_root(),
        help="the operator's --local-backend-dir (default: $LESSOR_LOCAL_BACKEND_DIR or "
        "<cache>/instances)",
    )
    gc.add_argument("--dry-run", action="store_true", help="list, stop nothing")
    gc.add_argument(
        "--include-unknown-host",
        action="store_true",
        help="also stop clusters whose host is not recorded (the layout before hosts)",
    )
    gc.add_argument("-o", "--output", choices=("text", "json"), default="text")
    args = parser.parse_args(argv)
    try:
        findings = collect(
            args.local_backend_dir,
            dry_run=args.dry_run,
            include_unknown_host=args.include_unknown_host,
        )
    except (ControlPlaneError, OSError) as error:
        # A cluster whose processes would not stop: say which, and leave the rest for a rerun.
        print(f"gc: {error}", file=sys.stderr)
        return 1
    if args.output == "json":
        print(json.dumps([f.as_json() for f in findings], indent=2))
        return 0
    for finding in findings:
        print(finding.describe())
    if not findings:
        print(f"no local clusters under {args.local_backend_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
