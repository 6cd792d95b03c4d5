"""A real Kubernetes control plane on loopback: etcd, kube-apiserver and, optionally, the
controller manager, the scheduler and kwok with one fake node.

The same code serves two users. Tests and the demo start a full cluster (with a node, so pods run
and `kubectl exec` works through kwok). The operator's `local` backend starts control-plane-only
clusters (etcd and kube-apiserver) as the ephemeral clusters it leases out. Everything the cluster
is, its certificates, data, logs, ports and pids, lives in one directory, described by
`state.json`, so another process can find it again, use it and stop it.
"""

from __future__ import annotations

import base64
import json
import shutil
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

import yaml

from lessor.controlplane.errors import ControlPlaneError
from lessor.controlplane.kubectl import run_kubectl
from lessor.controlplane.pki import CertificateAuthority, service_account_key, write_private
from lessor.controlplane.ports import PortReservation
from lessor.controlplane.processes import ProcessRecord, spawn, terminate
from lessor.protocol.kubeconfig import kubeconfig

NODE_NAME = "kwok-node-0"
NODE_CAPACITY = {"cpu": "1k", "memory": "1Ti", "pods": "1M", "ephemeral-storage": "1Ti"}
SERVICE_CIDR = "10.96.0.0/16"
STATE_FILE = "state.json"
# Pod ports that `kubectl port-forward` reaches on the kwok node; each leads to a host port of
# the cluster's own (`LocalControlPlane.forward_target`), so that two clusters on one machine
# (two test sessions, say) never share one (see _write_kwok_config).
FORWARDED_PORTS = tuple(range(18000, 18020))
# Anonymous callers may read the OIDC discovery document and JWKS, as on managed clusters, so
# that a client outside the cluster can verify ServiceAccount tokens with this API server as issuer.
# Every real cluster publishes its API server's addresses as the EndpointSlice `kubernetes`
# (lessor's NetworkPolicies let a cluster's own pod reach the host API there). This one's is
# 127.0.0.1, which an EndpointSlice may not hold, and its endpoint reconciler is off (see
# _start_apiserver): the slice stands for it with a documentation address (RFC 5737, never
# routed). No pod here connects through it: kwok runs none, and nothing enforces policies.
_API_ENDPOINTS = """
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kubernetes
  namespace: default
  labels: {kubernetes.io/service-name: kubernetes}
addressType: IPv4
endpoints:
- addresses: [192.0.2.1]
  conditions: {ready: true}
ports:
- {name: https, port: 6443, protocol: TCP}
"""
_DISCOVERY_BINDING = """
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: lessor-local-oidc-discovery
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:service-account-issuer-discovery
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: Group
  name: system:unauthenticated
"""


@dataclass
class ClusterState:
    """What another process needs to find, use and stop a running cluster."""

    binaries: str
    with_node: bool
    ports: dict[str, int] = field(default_factory=dict)
    # Pod port (as a string: JSON keys) -> the host port kwok forwards it to.
    forwards: dict[str, int] = field(default_factory=dict)
    processes: list[ProcessRecord] = field(default_factory=list)
    # Set only once start-up finished: a start interrupted by a crash (some processes spawned,
    # others not) is never mistaken for a running cluster.
    complete: bool = False

    @classmethod
    def load(cls, path: Path) -> ClusterState:
        data = json.loads(path.read_text())
        records = [ProcessRecord(**p) for p in data.pop("processes")]
        return cls(processes=records, **data)

    def save(self, path: Path) -> None:
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(asdict(self), indent=2))
        temporary.replace(path)


class LocalControlPlane:
    """One cluster whose every file lives under `directory`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        # Held while this object lives: the host ports of FORWARDED_PORTS, which only the
        # listeners the user starts later (with SO_REUSEADDR) may take.
        self._forward_ports = PortReservation()

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "kubeconfig"

    @property
    def state_path(self) -> Path:
        return self.directory / STATE_FILE

    @property
    def pki(self) -> Path:
        return self.directory / "pki"

    @property
    def logs(self) -> Path:
        return self.directory / "logs"

    def state(self) -> ClusterState | None:
        return ClusterState.load(self.state_path) if self.state_path.exists() else None

    def is_running(self) -> bool:
        state = self.state()
        return state is not None and state.complete and all(p.is_running() for p in state.processes)

    @property
    def server(self) -> str:
        state = self.state()
        if state is None:
            raise ControlPlaneError(f"no cluster recorded in {self.directory}")
        return f"https://127.0.0.1:{state.ports['apiserver']}"

    def start(
        self,
        binaries: Path,
        *,
        with_node: bool = True,
        detached: bool = False,
        timeout: float = 180.0,
        progress: Callable[[str], None] = lambda _: None,
    ) -> None:
        """Start the cluster and return once it serves (and its node is Ready, with a node).

        A failed start stops whatever it started and raises with the tail of the failing log.
        """
        if self.state_path.exists():
            raise ControlPlaneError(f"{self.directory} already holds a cluster; stop it first")
        self.directory.mkdir(parents=True, exist_ok=True)
        names = ["etcd", "etcd-peer", "apiserver"]
        if with_node:
            names += ["controller-manager", "scheduler", "kwok"]
        reservation = PortReservation()
        state = ClusterState(
            binaries=str(binaries),
            with_node=with_node,
            ports={n: reservation.take() for n in names},
            forwards={str(p): self._forward_ports.take() for p in FORWARDED_PORTS}
            if with_node
            else {},
        )
        state.save(self.state_path)
        deadline = time.monotonic() + timeout
        try:
            self._write_pki(state)
            self._start_etcd(state, detached)
            self._wait(deadline, "etcd", lambda: self._etcd_healthy(state))
            progress(f"etcd serves on 127.0.0.1:{state.ports['etcd']}")
            self._start_apiserver(state, detached)
            self._wait(deadline, "kube-apiserver", self.is_ready)
            progress(f"kube-apiserver serves on {self.server}")
            self.kubectl("apply", "-f", "-", input=_DISCOVERY_BINDING)
            self.kubectl("apply", "-f", "-", input=_API_ENDPOINTS)
            if with_node:
                self._start_node_components(state, detached)
                self._wait(deadline, "the kwok node", self._node_ready)
                self._wait(deadline, "the default service account", self._default_sa_exists)
                progress(f"node {NODE_NAME} is Ready (kwok)")
            for name, port in state.ports.items():
                self._wait(deadline, f"{name} to listen on {port}", partial(_listening, port))
            state.complete = True
            state.save(self.state_path)
        except BaseException:
            self.stop()
            raise
        finally:
            reservation.release()  # every component listens on its own port now

    def stop(self) -> None:
        """Stop every recorded process, newest first, and forget the cluster; keeps the files."""
        state = self.state()
        if state is None:
            return
        for record in reversed(state.processes):
            terminate(record)
        self.state_path.unlink()
        self._forward_ports.release()

    def destroy(self) -> None:
        """Stop the cluster and delete its directory (data, certificates, logs)."""
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        state = self.state()
        if state is None:
            raise ControlPlaneError(f"no cluster recorded in {self.directory}")
        kubectl = str(Path(state.binaries) / "kubectl")
        return run_kubectl(
            kubectl, self.kubeconfig, *args, input=input, check=check, timeout=timeout
        )

    # -- start-up steps ---------------------------------------------------------------------

    def _write_pki(self, state: ClusterState) -> None:
        ca = CertificateAuthority("lessor-local-ca")
        files: dict[str, bytes] = {"ca.crt": ca.cert_pem, "ca.key": ca.key_pem}
        leaves = {
            "apiserver": ca.issue(
                "kube-apiserver",
                server_names=(
                    "127.0.0.1",
                    "localhost",
                    "kubernetes",
                    "kubernetes.default",
                    "kubernetes.default.svc",
                    "10.96.0.1",
                ),
            ),
            "admin": ca.issue("lessor-admin", organization="system:masters", client=True),
            "kubelet-client": ca.issue(
                "kube-apiserver-kubelet-client", organization="system:masters", client=True
            ),
            "controller-manager": ca.issue("system:kube-controller-manager", client=True),
            "scheduler": ca.issue("system:kube-scheduler", client=True),
            "kwok": ca.issue("kwok-controller", organization="system:masters", client=True),
            "kwok-serving": ca.issue("kwok-serving", server_names=("127.0.0.1", "localhost")),
        }
        for name, pair in leaves.items():
            files[f"{name}.crt"] = pair.cert_pem
            files[f"{name}.key"] = pair.key_pem
        sa = service_account_key()
        files["sa.pub"], files["sa.key"] = sa.cert_pem, sa.key_pem
        for filename, data in files.items():
            write_private(self.pki / filename, data)
        server = f"https://127.0.0.1:{state.ports['apiserver']}"
        self._write_kubeconfig(self.kubeconfig, server, "admin")
        for user in ("controller-manager", "scheduler", "kwok"):
            self._write_kubeconfig(self.pki / f"{user}.kubeconfig", server, user)

    def _write_kubeconfig(self, path: Path, server: str, user: str) -> None:
        """A self-contained kubeconfig (certificates embedded) that works from any directory."""

        def b64(name: str) -> str:
            return base64.b64encode((self.pki / name).read_bytes()).decode()

        credentials = {
            "client-certificate-data": b64(f"{user}.crt"),
            "client-key-data": b64(f"{user}.key"),
        }
        document = kubeconfig("lessor-local", server, user, credentials, ca_data=b64("ca.crt"))
        write_private(path, document.encode())

    def _spawn(self, state: ClusterState, name: str, argv: list[str], detached: bool) -> None:
        state.processes.append(spawn(name, argv, self.logs / f"{name}.log", detached=detached))
        state.save(self.state_path)

    def _binary(self, state: ClusterState, name: str) -> str:
        return str(Path(state.binaries) / name)

    def _start_etcd(self, state: ClusterState, detached: bool) -> None:
        client = f"http://127.0.0.1:{state.ports['etcd']}"
        peer = f"http://127.0.0.1:{state.ports['etcd-peer']}"
        argv = [
            self._binary(state, "etcd"),
            "--name=etcd",
            f"--data-dir={self.directory / 'etcd'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=etcd={peer}",
            "--initial-cluster-state=new",
            # Throwaway clusters: losing the last writes on a host crash is acceptable, and
            # skipping fsync makes every write several times faster on ordinary disks.
            "--unsafe-no-fsync=true",
            "--quota-backend-bytes=2147483648",
            "--log-level=warn",
        ]
        self._spawn(state, "etcd", argv, detached)

    def _start_apiserver(self, state: ClusterState, detached: bool) -> None:
        pki = self.pki
        port = state.ports["apiserver"]
        argv = [
            self._binary(state, "kube-apiserver"),
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={port}",
            f"--etcd-servers=http://127.0.0.1:{state.ports['etcd']}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--service-account-issuer=https://127.0.0.1:{port}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=Node,RBAC",
            f"--kubelet-client-certificate={pki / 'kubelet-client.crt'}",
            f"--kubelet-client-key={pki / 'kubelet-client.key'}",
            "--kubelet-preferred-address-types=InternalIP",
            "--allow-privileged=true",
            # The "kubernetes" Service would point at 127.0.0.1, which the endpoint reconciler
            # refuses; nothing in these clusters reaches the API server through that Service.
            "--endpoint-reconciler-type=none",
            "--profiling=false",
        ]
        self._spawn(state, "kube-apiserver", argv, detached)

    def _start_node_components(self, state: ClusterState, detached: bool) -> None:
        pki = self.pki
        manager = [
            self._binary(state, "kube-controller-manager"),
            f"--kubeconfig={pki / 'controller-manager.kubeconfig'}",
            f"--authentication-kubeconfig={pki / 'controller-manager.kubeconfig'}",
            f"--authorization-kubeconfig={pki / 'controller-manager.kubeconfig'}",
            "--bind-address=127.0.0.1",
            f"--secure-port={state.ports['controller-manager']}",
            "--leader-elect=false",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'ca.crt'}",
            f"--cluster-signing-cert-file={pki / 'ca.crt'}",
            f"--cluster-signing-key-file={pki / 'ca.key'}",
            "--controllers=*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-route",
        ]
        self._spawn(state, "kube-controller-manager", manager, detached)
        scheduler = [
            self._binary(state, "kube-scheduler"),
            f"--kubeconfig={pki / 'scheduler.kubeconfig'}",
            f"--authentication-kubeconfig={pki / 'scheduler.kubeconfig'}",
            f"--authorization-kubeconfig={pki / 'scheduler.kubeconfig'}",
            "--bind-address=127.0.0.1",
            f"--secure-port={state.ports['scheduler']}",
            "--leader-elect=false",
        ]
        self._spawn(state, "kube-scheduler", scheduler, detached)
        self._write_kwok_config(state)
        kwok = [
            self._binary(state, "kwok"),
            f"--kubeconfig={pki / 'kwok.kubeconfig'}",
            f"--config={self.directory / 'kwok.yaml'}",
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            "--node-ip=127.0.0.1",
            f"--node-port={state.ports['kwok']}",
            f"--server-address=127.0.0.1:{state.ports['kwok']}",
            f"--tls-cert-file={pki / 'kwok-serving.crt'}",
            f"--tls-private-key-file={pki / 'kwok-serving.key'}",
            # Heartbeats by node Lease, as a kubelet's: without them the node lifecycle
            # controller found the node's status stale about 40 s after start, marked every pod
            # on it NotReady, and nothing ever marked them Ready again.
            "--node-lease-duration-seconds=40",
        ]
        self._spawn(state, "kwok", kwok, detached)
        self.kubectl("apply", "-f", "-", input=_node_manifest())

    def _write_kwok_config(self, state: ClusterState) -> None:
        """Pods on the fake node exec as local processes in the cluster's `node/` directory; their
        logs and attach stream are the file `node/pod.log` (kwok serves one file for all pods, in
        the kubelet's CRI log format; a test that wants output writes it there); port-forward to
        a pod port in FORWARDED_PORTS reaches 127.0.0.1 on that port's `forward_target`."""
        workdir = self.directory / "node"
        workdir.mkdir(exist_ok=True)
        log_file = workdir / "pod.log"
        log_file.touch()
        api = "kwok.x-k8s.io/v1alpha1"
        documents = [
            {
                "apiVersion": api,
                "kind": "ClusterExec",
                "metadata": {"name": "local-exec"},
                "spec": {"execs": [{"local": {"workDir": str(workdir)}}]},
            },
            {
                "apiVersion": api,
                "kind": "ClusterLogs",
                "metadata": {"name": "local-logs"},
                "spec": {"logs": [{"logsFile": str(log_file), "follow": True}]},
            },
            {
                "apiVersion": api,
                "kind": "ClusterAttach",
                "metadata": {"name": "local-attach"},
                "spec": {"attaches": [{"logsFile": str(log_file)}]},
            },
            {
                # kwok forwards a pod port only to a fixed target, so each forwardable port is
                # listed: pod port P reaches whatever listens on 127.0.0.1:forwards[P] here.
                "apiVersion": api,
                "kind": "ClusterPortForward",
                "metadata": {"name": "local-port-forward"},
                "spec": {
                    "forwards": [
                        {"ports": [int(pod)], "target": {"address": "127.0.0.1", "port": host}}
                        for pod, host in state.forwards.items()
                    ]
                },
            },
        ]
        (self.directory / "kwok.yaml").write_text(yaml.safe_dump_all(documents, sort_keys=False))

    def forward_target(self, pod_port: int) -> int:
        """The host port that a port-forward to `pod_port` (one of FORWARDED_PORTS) reaches: a
        server playing the pod's listens there (with SO_REUSEADDR, as socket.create_server
        does, beside this process's reservation of the port)."""
        state = self.state()
        if state is None or str(pod_port) not in state.forwards:
            raise ControlPlaneError(f"pod port {pod_port} is not forwarded by {self.directory}")
        return state.forwards[str(pod_port)]

    @property
    def pod_log(self) -> Path:
        """The file kwok serves as every pod's log and attach output."""
        return self.directory / "node" / "pod.log"

    # -- readiness probes -------------------------------------------------------------------

    def _wait(self, deadline: float, what: str, probe: Callable[[], bool]) -> None:
        state = self.state()
        while time.monotonic() < deadline:
            if state is not None:
                dead = [p for p in state.processes if not p.is_running()]
                if dead:
                    raise ControlPlaneError(
                        f"{dead[0].name} exited while waiting for {what}:\n"
                        + self._log_tail(dead[0].name)
                    )
            if probe():
                return
            time.sleep(0.2)
        raise ControlPlaneError(f"timed out waiting for {what}; logs are in {self.logs}")

    def _log_tail(self, name: str, lines: int = 30) -> str:
        path = self.logs / f"{name}.log"
        if not path.exists():
            return "(no log)"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def _etcd_healthy(self, state: ClusterState) -> bool:
        url = f"http://127.0.0.1:{state.ports['etcd']}/health"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return bool(json.load(response).get("health") == "true")
        except (OSError, ValueError):
            return False

    def is_ready(self) -> bool:
        """Whether kube-apiserver answers /readyz with 200, as the admin."""
        context = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        context.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        try:
            url = f"{self.server}/readyz"  # always https://127.0.0.1:<port>, never user input
            with urllib.request.urlopen(url, timeout=2, context=context) as r:  # noqa: S310
                return bool(r.status == 200)
        except (OSError, urllib.error.HTTPError):
            return False

    def _node_ready(self) -> bool:
        result = self.kubectl(
            "get",
            "node",
            NODE_NAME,
            "-o",
            "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
            check=False,
        )
        return result.stdout.strip() == "True"

    def _default_sa_exists(self) -> bool:
        return self.kubectl("get", "serviceaccount", "default", check=False).returncode == 0


def _listening(port: int) -> bool:
    """Whether something accepts connections on the port (a reservation alone does not)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def _node_manifest() -> str:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": NODE_NAME,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": NODE_NAME,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
            },
        },
        # What kwok would give it, and local disk as every real node declares (a pod that
        # requests ephemeral storage, as a LimitRange makes each do, schedules only there).
        "status": {"capacity": NODE_CAPACITY, "allocatable": NODE_CAPACITY},
    }
    return json.dumps(node)
