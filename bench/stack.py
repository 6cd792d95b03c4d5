"""The local stack a benchmark runs against, and the clients that measure it.

`local_stack()` starts a local control plane with lessor's CRDs, the operator and the API
server, and an AccessPolicy accepting a static token, an Ed25519 key (requests signed here, as
the CLI's agent would) and ServiceAccount tokens of the control plane as OIDC tokens; it stops
everything on exit. `Client` speaks HTTP with any of those credentials.
"""

from __future__ import annotations

import base64
import http.client
import json
import secrets
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from lessor.apiserver.auth.ssh import ed25519_key_blob, ed25519_signature_blob
from lessor.controlplane.binaries import ensure_binaries
from lessor.controlplane.cluster import LocalControlPlane
from lessor.controlplane.kubectl import wait_established
from lessor.controlplane.local_clusters import every_cluster
from lessor.controlplane.ports import PortReservation
from lessor.controlplane.watchdog import watch_over
from lessor.protocol.ssh_signature import SCHEME, audience_of, canonical_request

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "bench"
TOKEN = "bench-token"  # noqa: S105 - a throwaway static token for a throwaway cluster
SUBJECT = f"system:serviceaccount:{NAMESPACE}:bench"


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def percentiles(samples: list[float], unit: float = 1.0, digits: int = 4) -> dict[str, float]:
    """p50, p90, p99, max and count of `samples` (seconds), multiplied by `unit`."""
    ordered = sorted(samples)
    if not ordered:
        return {"count": 0}

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * unit, digits)

    return {
        "count": len(ordered),
        "p50": round(statistics.median(ordered) * unit, digits),
        "p90": at(0.90),
        "p99": at(0.99),
        "max": round(ordered[-1] * unit, digits),
    }


@dataclass
class Client:
    """One HTTP/1.1 connection (kept alive) to the API with one credential."""

    base: str
    authorization: Callable[[str, str, bytes], str | None]
    connection: http.client.HTTPConnection = field(init=False)

    def __post_init__(self) -> None:
        parts = urlsplit(self.base)
        self.connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=60)

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else b""
        headers = {"Content-Type": "application/json"} if data else {}
        header = self.authorization(method, path, data)
        if header:
            headers["Authorization"] = header
        for attempt in range(2):
            try:
                self.connection.request(method, path, body=data or None, headers=headers)
                answer = self.connection.getresponse()
                raw = answer.read()
                break
            except (http.client.HTTPException, OSError):
                self.connection.close()
                if attempt:
                    raise
                header = self.authorization(method, path, data)  # a nonce is single-use
                if header:
                    headers["Authorization"] = header
        is_json = (answer.getheader("Content-Type") or "").startswith("application/json")
        return answer.status, json.loads(raw) if raw and is_json else raw.decode()


@dataclass
class Stack:
    cluster: LocalControlPlane
    base: str
    work: Path
    ssh_key: Ed25519PrivateKey
    processes: list[subprocess.Popen[bytes]]
    operator_port: int = 0
    _session_token: str | None = None

    def lease_conflicts(self) -> int:
        """Lease reconciles so far that lost a race (a fenced write refused) and were requeued."""
        samples = metrics(self.operator_port)
        return int(
            samples.get('lessor_reconcile_total{controller="clusterlease",result="conflict"}', 0)
        )

    def apply(self, document: dict[str, Any]) -> None:
        document["metadata"]["namespace"] = NAMESPACE
        self.cluster.kubectl("apply", "-f", "-", input=json.dumps(document))

    def pool(
        self, name: str, warm: int, backend: str = "local", max_instances: int | None = None
    ) -> None:
        spec: dict[str, Any] = {"warmTarget": warm, "ttl": "30m", "backend": {"type": backend}}
        if max_instances is not None:
            spec["maxInstances"] = max_instances
        self.apply(
            {
                "apiVersion": "lessor.dev/v1alpha1",
                "kind": "ClusterPool",
                "metadata": {"name": name},
                "spec": spec,
            }
        )

    def sandbox_lease(self, **spec: Any) -> str:
        """A Ready Sandbox lease from a one-sandbox pool `bench` with `spec` added (the stack
        must run with `--agent-sandbox-mode=external` and the agent-sandbox controller)."""
        self.apply({
            "apiVersion": "lessor.dev/v1alpha1", "kind": "SandboxPool",
            "metadata": {"name": "bench"},
            "spec": {"warm": 1, **spec,
                     "template": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}},
        })  # fmt: skip
        client = self.static()
        deadline = time.monotonic() + 300
        while True:
            status, created = client.call(
                "POST", "/v1/sandbox-leases", {"pool": "bench", "ttl": "1h"}
            )
            if status == 202:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"no Sandbox lease: {created}")
            time.sleep(1)  # the pool is not served until the operator reconciled it
        while client.call("GET", f"/v1/sandbox-leases/{created['id']}")[1]["phase"] != "Ready":
            if time.monotonic() > deadline:
                raise TimeoutError("the sandbox did not become Ready")
            time.sleep(0.2)
        return str(created["id"])

    # -- credentials -----------------------------------------------------------------------

    def bearer(self, token: str) -> Callable[[str, str, bytes], str | None]:
        return lambda _method, _path, _body: f"Bearer {token}"

    def static(self) -> Client:
        return Client(self.base, self.bearer(TOKEN))

    def oidc(self) -> Client:
        token = self.cluster.kubectl(
            "create", "token", "bench", "-n", NAMESPACE, "--audience=lessor", "--duration=2h"
        ).stdout.strip()
        return Client(self.base, self.bearer(token))

    def session(self) -> Client:
        """A client of one session, made at the first call: logins are rate limited per
        identity (each client logging in, as 32 once did, was refused)."""
        if self._session_token is None:
            status, body = self.static().call("POST", "/v1/login")
            assert status == 200, body
            self._session_token = body["session_token"]
        return Client(self.base, self.bearer(self._session_token))

    def ssh(self) -> Client:
        raw = self.ssh_key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        key = base64.b64encode(ed25519_key_blob(raw)).decode()

        audience = audience_of(self.base)

        def sign(method: str, path: str, body: bytes) -> str:
            stamp, nonce = int(time.time()), secrets.token_urlsafe(24)
            message = canonical_request(
                audience, method, path, timestamp=stamp, nonce=nonce, body=body
            )
            signature = base64.b64encode(ed25519_signature_blob(self.ssh_key.sign(message)))
            return (
                f'{SCHEME} key="{key}", aud="{audience}", ts="{stamp}", nonce="{nonce}", '
                f'sig="{signature.decode()}"'
            )

        return Client(self.base, sign)

    # -- pools and leases ------------------------------------------------------------------

    def ready(self, pool: str) -> int:
        status, body = self.static().call("GET", f"/v1/pools/{pool}")
        return int(body.get("ready", 0)) if status == 200 else 0

    def wait_ready(self, pool: str, count: int, timeout: float = 900) -> None:
        deadline = time.monotonic() + timeout
        while self.ready(pool) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"pool {pool} never had {count} ready clusters")
            time.sleep(0.5)

    def release_all(self) -> None:
        client = self.static()
        for lease in client.call("GET", "/v1/leases")[1]:
            client.call("DELETE", f"/v1/leases/{lease['id']}")

    def kube_floor(self) -> tuple[Callable[[], None], Callable[[], None]]:
        """(a GET, a create) of a small object straight on the kube-apiserver, with the
        admin client certificate: the cost floor every lessor figure is compared with."""
        pki = self.cluster.pki
        context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        parts = urlsplit(self.cluster.server)
        local = threading.local()

        def connection() -> http.client.HTTPSConnection:
            if not hasattr(local, "connection"):
                local.connection = http.client.HTTPSConnection(
                    parts.hostname or "", parts.port, context=context, timeout=60
                )
            found: http.client.HTTPSConnection = local.connection
            return found

        def call(method: str, path: str, body: bytes | None) -> None:
            conn = connection()
            conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
            answer = conn.getresponse()
            answer.read()
            assert answer.status < 300, answer.status

        base = f"/api/v1/namespaces/{NAMESPACE}/configmaps"

        def create() -> None:
            name = f"floor-{secrets.token_hex(6)}"
            body = {"metadata": {"name": name}, "data": {"k": "v"}}
            call("POST", base, json.dumps(body).encode())

        call("POST", base, json.dumps({"metadata": {"name": "floor"}, "data": {}}).encode())
        return (lambda: call("GET", f"{base}/floor", None)), create


def metrics(port: int) -> dict[str, float]:
    """The Prometheus samples served on 127.0.0.1:`port`, by name and labels."""
    url = f"http://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name] = values.get(name, 0.0) + float(value)
    return values


def api_server(cluster: LocalControlPlane, port: int, workers: int) -> list[str]:
    """The API server's `python -m` arguments for a benchmark."""
    return [
        "lessor.apiserver", f"--kubeconfig={cluster.kubeconfig}", f"--namespace={NAMESPACE}",
        f"--bind=127.0.0.1:{port}", f"--ssh-audience=http://127.0.0.1:{port}",
        f"--workers={workers}", "--worker-connections=2000",
        # The benchmarks measure the server, not the per-principal admission limits (they send
        # as one principal what a fleet of callers would) nor load shedding (bench/shedding.py
        # sets its own bound; the last flag wins).
        "--lease-admission-rate=1000000", "--lease-admission-burst=1000000",
        "--ssh-signed-rate=1000000", "--ssh-signed-burst=1000000",
        "--max-in-flight=1000000",
    ]  # fmt: skip


def healthy(client: Client) -> bool:
    try:
        return client.call("GET", "/healthz")[0] == 200
    except OSError:
        return False


@contextmanager
def local_stack(
    *,
    api_workers: int = 2,
    with_node: bool = False,
    operator_args: tuple[str, ...] = (),
    api_args: tuple[str, ...] = (),
) -> Iterator[Stack]:
    binaries = ensure_binaries(progress)
    with tempfile.TemporaryDirectory(prefix="lessor-bench-") as directory:
        work = Path(directory)
        watch_over(work, remove=True)  # a benchmark killed mid-way leaves nothing running
        cluster = LocalControlPlane(work / "cluster")
        cluster.start(binaries, with_node=with_node)
        processes: list[subprocess.Popen[bytes]] = []
        key = Ed25519PrivateKey.generate()
        ports = PortReservation()  # held while the stack runs (lessor.controlplane.ports)
        try:
            configure(cluster, key)
            log = (work / "lessor.log").open("ab")
            common = [f"--kubeconfig={cluster.kubeconfig}", f"--namespace={NAMESPACE}"]
            port, operator_port = ports.take(), ports.take()
            for argv in (
                ["lessor.operator", *common, "--http-host=127.0.0.1",
                 f"--http-port={operator_port}", f"--local-backend-dir={work / 'instances'}",
                 *operator_args],
                [*api_server(cluster, port, api_workers), *api_args],
            ):  # fmt: skip
                processes.append(
                    subprocess.Popen([sys.executable, "-m", *argv], stdout=log, stderr=log)
                )
            stack = Stack(cluster, f"http://127.0.0.1:{port}", work, key, processes, operator_port)
            deadline = time.monotonic() + 60
            while not healthy(Client(stack.base, lambda *_: None)):
                if time.monotonic() > deadline:
                    raise TimeoutError("the API server did not start")
                time.sleep(0.1)
            yield stack
        finally:
            for process in reversed(processes):
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=120)
            ports.release()
            for leftover in every_cluster(work / "instances"):
                LocalControlPlane(leftover).destroy()
            cluster.destroy()


def configure(cluster: LocalControlPlane, key: Ed25519PrivateKey) -> None:
    cluster.kubectl("apply", "-f", str(ROOT / "crds"))
    wait_established(cluster)
    cluster.kubectl("create", "namespace", NAMESPACE)
    cluster.kubectl("create", "serviceaccount", "bench", "-n", NAMESPACE)
    cluster.kubectl(
        "create", "secret", "generic", "tokens", "-n", NAMESPACE, f"--from-literal=bench={TOKEN}"
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    policy = {
        "apiVersion": "lessor.dev/v1alpha1",
        "kind": "AccessPolicy",
        "metadata": {"name": "bench", "namespace": NAMESPACE},
        "spec": {
            "auth": {
                "oidc": {
                    "issuer": cluster.server,
                    "audience": ["lessor"],
                    "jwksUrl": f"{cluster.server}/openid/v1/jwks",
                    "caBundle": (cluster.pki / "ca.crt").read_text(),
                },
                "staticTokens": [
                    {"secretRef": {"name": "tokens", "key": "bench"}, "claims": {"sub": SUBJECT}}
                ],
                "sshKeys": [{"publicKey": public.decode(), "claims": {"sub": SUBJECT}}],
            },
            # One identity whichever the credential: the ServiceAccount's OIDC subject.
            "identity": "{sub}",
            "rules": [{"pools": ["*"], "maxConcurrentLeases": 100000}],
            "sandbox": [{"pools": ["*"], "verbs": ["lease", "release"]}],
        },
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(policy))
