"""The `local` backend: each instance is a control-plane-only cluster (etcd and kube-apiserver
processes) on the operator's host, from the local control plane's binary cache.

It is what the demo, the e2e suite and the benchmarks lease: a real API server whose kubeconfig
works with kubectl, created in a few seconds without containers. The processes run in their own
sessions and outlive the operator; the instance's directory (derived from its uid) records their
pids and ports, so a restarted operator re-adopts running clusters instead of leaking or
recreating them. Each directory lives under its host cluster's (lessor.controlplane.local_clusters),
so that the clusters of a host that is stopped or gone can be found and stopped too.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from lessor.controlplane.binaries import ensure_binaries
from lessor.controlplane.cluster import LocalControlPlane
from lessor.controlplane.errors import ControlPlaneError
from lessor.controlplane.local_clusters import Host, default_root, host_directory, record_host
from lessor.operator.backends.base import BackendError, InstanceRef, Readiness, TeardownReport


class LocalBackend:
    def __init__(self, host: Host, root: Path | None = None, start_timeout: float = 120.0) -> None:
        self.host = host
        self.root = root or default_root()
        self.host_directory = host_directory(self.root, host.uid)
        self.start_timeout = start_timeout

    def directory(self, instance: InstanceRef) -> Path:
        return self.host_directory / f"{instance.namespace}_{instance.name}_{instance.uid}"

    def _cluster(self, instance: InstanceRef) -> LocalControlPlane:
        return LocalControlPlane(self.directory(instance))

    async def provision(self, instance: InstanceRef) -> None:
        await asyncio.to_thread(self._provision, instance)

    def _provision(self, instance: InstanceRef) -> None:
        cluster = self._cluster(instance)
        if cluster.is_running():
            return  # adopted: started by this or an earlier operator process
        # Before the first cluster of this host: `gc` must be able to ask whether the host lives.
        record_host(self.root, self.host)
        # A record without running processes is a start interrupted by a crash, or a cluster
        # whose processes died: start again from nothing rather than trust half-written state.
        cluster.destroy()
        try:
            binaries = ensure_binaries(lambda _: None)
            cluster.start(binaries, with_node=False, detached=True, timeout=self.start_timeout)
        except ControlPlaneError as error:
            raise BackendError(str(error)) from error

    async def readiness(self, instance: InstanceRef) -> Readiness:
        return await asyncio.to_thread(self._readiness, instance)

    def _readiness(self, instance: InstanceRef) -> Readiness:
        cluster = self._cluster(instance)
        state = cluster.state()
        if state is None:
            return Readiness(False, "not started")
        details = {
            "endpoint": f"https://127.0.0.1:{state.ports['apiserver']}",
            "directory": str(cluster.directory),
            "pids": ",".join(f"{p.name}={p.pid}" for p in state.processes),
        }
        dead = [p.name for p in state.processes if not p.is_running()]
        if dead:
            return Readiness(False, f"process exited: {', '.join(dead)}", details)
        if not cluster.is_ready():
            return Readiness(False, "kube-apiserver is not ready yet", details)
        return Readiness(True, "kube-apiserver is ready", details)

    async def kubeconfig(self, instance: InstanceRef) -> str:
        path = self._cluster(instance).kubeconfig
        try:
            return await asyncio.to_thread(path.read_text)
        except OSError as error:
            raise BackendError(f"kubeconfig of {instance.name} unreadable: {error}") from error

    async def teardown(self, instance: InstanceRef) -> None:
        await asyncio.to_thread(self._teardown, instance)

    def _teardown(self, instance: InstanceRef) -> None:
        try:
            self._cluster(instance).destroy()
        except (ControlPlaneError, OSError) as error:
            raise BackendError(f"teardown of {instance.name} failed: {error}") from error

    async def verify_teardown(self, instance: InstanceRef) -> TeardownReport:
        return await asyncio.to_thread(self._verify_teardown, instance)

    def _verify_teardown(self, instance: InstanceRef) -> TeardownReport:
        """Look for the directory and for any process that still names it on its command line.

        The process scan does not rely on the pids recorded in the directory, which teardown
        itself deletes: a process that escaped the record is found all the same.
        """
        directory = self.directory(instance)
        evidence: list[str] = []
        survivors = _processes_mentioning(str(directory))
        if survivors:
            evidence.append(f"processes still running: {', '.join(map(str, survivors))}")
        if directory.exists():
            remaining = sorted(str(p) for p in directory.rglob("*"))[:20]
            evidence.append(f"directory {directory} remains: {', '.join(remaining) or 'empty'}")
        if evidence:
            return TeardownReport(verified=False, evidence=evidence)
        return TeardownReport(
            verified=True,
            evidence=[f"no process mentions {directory}", f"{directory} does not exist"],
        )


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(int(entry.name))
    return found
