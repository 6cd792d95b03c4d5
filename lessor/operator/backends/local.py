"""The `local` backend: each instance is a control-plane-only cluster (etcd and kube-apiserver
processes) on the operator's host, from the local control plane's binary cache.

It is what the demo, the e2e suite and the benchmarks lease: a real API server whose kubeconfig
works with kubectl, created in a few seconds without containers. The processes run in their own
sessions and outlive the operator; the instance's directory (derived from its uid) records their
pids and ports, so a restarted operator re-adopts running clusters instead of leaking or
recreating them. Each directory lives under its host cluster's (lessor.controlplane.local_clusters),
so that the clusters of a host that is stopped or gone can be found and stopped too.

The host is named by the uid of its `kube-system` namespace: a cluster-scoped read that a
namespaced operator needs for nothing else, granted only by manifests/local-backend. So it is
read when a cluster is first started (HostIdentity), never by an operator that serves only other
backends; every other step finds an instance's directory by the instance's uid alone, which no
two hosts share.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from lessor.controlplane.binaries import ensure_binaries
from lessor.controlplane.cluster import LocalControlPlane
from lessor.controlplane.errors import ControlPlaneError
from lessor.controlplane.local_clusters import (
    Host,
    default_root,
    host_directory,
    record_host,
    stop_cluster,
)
from lessor.controlplane.processes import processes_mentioning
from lessor.operator.backends import lease_credentials
from lessor.operator.backends.base import (
    BackendError,
    InstanceRef,
    LeaseRef,
    Readiness,
    TeardownReport,
)
from lessor.operator.runtime.client import ApiError, KubeClient

log = logging.getLogger(__name__)

Identify = Callable[[], Awaitable[Host]]


class HostIdentity:
    """The cluster `client` talks to, read once, when first asked; until a read succeeds each
    call fails with a message that names the missing permission, and the next call tries again."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self._host: Host | None = None
        self._lock = asyncio.Lock()

    async def __call__(self) -> Host:
        async with self._lock:
            if self._host is None:
                self._host = await self._read()
                log.info("the local backend's host cluster is %s", self._host.uid)
            return self._host

    async def _read(self) -> Host:
        try:
            namespace = await self.client.get("/api/v1/namespaces/kube-system")
        except ApiError as error:
            raise BackendError(
                "cannot read namespace kube-system, whose uid names the host cluster that "
                f"`local` clusters belong to ({error}); install manifests/local-backend"
            ) from error
        # Its API server URL and CA let a later `gc` ask whether the host still answers.
        server, ca = self.client.endpoint()
        return Host(uid=str(namespace["metadata"]["uid"]), server=server, ca_pem=ca)


class LocalBackend:
    def __init__(
        self, identify: Identify, root: Path | None = None, start_timeout: float = 120.0
    ) -> None:
        self.identify = identify
        self.root = root or default_root()
        self.start_timeout = start_timeout

    @classmethod
    def of_host(cls, host: Host, root: Path | None = None) -> LocalBackend:
        """A backend whose host is known already (tests, tools)."""

        async def known() -> Host:
            return host

        return cls(known, root)

    @staticmethod
    def name(instance: InstanceRef) -> str:
        return f"{instance.namespace}_{instance.name}_{instance.uid}"

    def directory(self, instance: InstanceRef) -> Path | None:
        """The instance's cluster directory, under whichever host it was started for; None if
        it has none."""
        found = sorted(p for p in self.root.glob(f"*/{self.name(instance)}") if p.is_dir())
        return found[0] if found else None

    async def host_directory(self) -> Path:
        """This host's directory, where new clusters go; BackendError if it cannot be named."""
        return host_directory(self.root, (await self.identify()).uid)

    async def provision(self, instance: InstanceRef) -> None:
        directory = self.directory(instance)
        if directory is None:
            host = await self.identify()
            # Before the host's first cluster: `gc` must be able to ask whether the host lives.
            await asyncio.to_thread(record_host, self.root, host)
            directory = host_directory(self.root, host.uid) / self.name(instance)
        await asyncio.to_thread(self._start, LocalControlPlane(directory))

    def _start(self, cluster: LocalControlPlane) -> None:
        if cluster.is_running():
            return  # adopted: started by this or an earlier operator process
        # A record without running processes is a start interrupted by a crash, or a cluster
        # whose processes died: start again from nothing rather than trust half-written state.
        # Hunted by command line too: a process started by an operator killed before it
        # recorded it is in no record, and would outlive the cluster started in its place (a
        # kube-apiserver found so at teardown quarantined a chaos test's lease).
        stop_cluster(cluster.directory)
        try:
            binaries = ensure_binaries(lambda _: None)
            cluster.start(binaries, with_node=False, detached=True, timeout=self.start_timeout)
        except ControlPlaneError as error:
            raise BackendError(str(error)) from error

    async def readiness(self, instance: InstanceRef) -> Readiness:
        return await asyncio.to_thread(self._readiness, instance)

    def _readiness(self, instance: InstanceRef) -> Readiness:
        directory = self.directory(instance)
        cluster = LocalControlPlane(directory) if directory else None
        state = cluster.state() if cluster else None
        if cluster is None or state is None:
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
        directory = self.directory(instance)
        if directory is None:
            raise BackendError(f"{instance.name} has no cluster")
        try:
            return await asyncio.to_thread(LocalControlPlane(directory).kubeconfig.read_text)
        except OSError as error:
            raise BackendError(f"kubeconfig of {instance.name} unreadable: {error}") from error

    async def lease_kubeconfig(self, instance: InstanceRef, admin: str, lease: LeaseRef) -> str:
        """Signed with the cluster's CA, whose key lives in its directory beside the admin's."""
        directory = self.directory(instance)
        if directory is None:
            raise BackendError(f"{instance.name} has no cluster")
        pki = LocalControlPlane(directory).pki
        try:
            ca_cert = await asyncio.to_thread((pki / "ca.crt").read_bytes)
            ca_key = await asyncio.to_thread((pki / "ca.key").read_bytes)
        except OSError as error:
            raise BackendError(f"the CA of {instance.name} is unreadable: {error}") from error
        return await lease_credentials.signed_by_lessor(admin, ca_cert, ca_key, lease)

    async def teardown(self, instance: InstanceRef) -> None:
        directory = self.directory(instance)
        if directory is None:
            return
        try:
            await asyncio.to_thread(stop_cluster, directory)
        except (ControlPlaneError, OSError) as error:
            raise BackendError(f"teardown of {instance.name} failed: {error}") from error

    async def verify_teardown(self, instance: InstanceRef) -> TeardownReport:
        return await asyncio.to_thread(self._verify_teardown, instance)

    def _verify_teardown(self, instance: InstanceRef) -> TeardownReport:
        """Look, under every host, for the directory and for any process that still names it
        on its command line.

        The process scan does not rely on the pids recorded in the directory, which teardown
        itself deletes: a process that escaped the record is found all the same.
        """
        hosts = [p for p in self.root.iterdir() if p.is_dir()] if self.root.is_dir() else []
        places = [host / self.name(instance) for host in hosts]
        evidence: list[str] = []
        survivors = sorted({pid for place in places for pid in processes_mentioning(str(place))})
        if survivors:
            evidence.append(f"processes still running: {', '.join(map(str, survivors))}")
        for directory in (place for place in places if place.exists()):
            remaining = sorted(str(p) for p in directory.rglob("*"))[:20]
            evidence.append(f"directory {directory} remains: {', '.join(remaining) or 'empty'}")
        if evidence:
            return TeardownReport(verified=False, evidence=evidence)
        where = self.root / "*" / self.name(instance)
        return TeardownReport(
            verified=True, evidence=[f"no process mentions {where}", f"{where} does not exist"]
        )
