"""Running the real operator process against the local control plane, and looking at what it did.

Tests drive the operator only as a user would: objects in, status and events out, the process
started, SIGKILLed and restarted like a real deployment's pod.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from lessor.controlplane.cluster import LocalControlPlane
from lessor.controlplane.kubectl import Cluster
from lessor.controlplane.local_clusters import every_cluster
from lessor.controlplane.ports import PortReservation
from lessor.protocol.json_object import Json

T = TypeVar("T")


def wait_for(
    what: str, probe: Callable[[], T | None], timeout: float = 120.0, every: float = 0.2
) -> T:
    """Poll until `probe` returns something truthy; the timeout is a hang guard, not a figure."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


CRASHING = Path(__file__).with_name("crashing_operator.py")


@dataclass(frozen=True)
class CrashPoint:
    """Just `when` ("before" or "after") the operator's `nth` write of `resource` (a plural, or
    "any"), recorded in `record`."""

    when: str
    nth: int
    resource: str
    record: Path


@dataclass
class Operator:
    kubeconfig: Path
    namespace: str
    backend_dir: Path
    log_path: Path
    lease_duration: float = 4.0
    # How long a teardown may take before the operator quarantines: long enough that only a
    # real failure, never a busy machine, gets there. Tests of quarantine itself shorten it.
    teardown_grace: float = 120.0
    leader_election: bool = True
    extra: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # beside this process's own
    process: subprocess.Popen[bytes] | None = None
    # The port of /metrics stays reserved for this operator's life, restarts included: a
    # restarted process finds it free, and no other process on the machine is handed it.
    ports: PortReservation = field(default_factory=PortReservation, repr=False)
    port: int = field(init=False)

    def __post_init__(self) -> None:
        self.port = self.ports.take()

    def start(self, crash: CrashPoint | None = None) -> Operator:
        """Start the operator; with `crash`, one that SIGKILLs itself at that point of its work
        (tests/integration/crashing_operator.py)."""
        program = ["-m", "lessor.operator"]
        if crash is not None:
            program = [CRASHING, crash.when, str(crash.nth), crash.resource, crash.record, "--"]
        argv = [
            sys.executable,
            *map(str, program),
            f"--kubeconfig={self.kubeconfig}",
            f"--namespace={self.namespace}",
            "--http-host=127.0.0.1",
            f"--http-port={self.port}",
            f"--local-backend-dir={self.backend_dir}",
            f"--lease-duration={self.lease_duration}",
            f"--renew-deadline={self.lease_duration * 0.75}",
            f"--retry-period={self.lease_duration / 8}",
            f"--teardown-grace={self.teardown_grace}",
        ]
        if not self.leader_election:
            argv.append("--no-leader-election")
        argv += self.extra
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **self.env}
            )
        return self

    def kill(self, signum: int = signal.SIGKILL) -> int:
        assert self.process is not None
        self.process.send_signal(signum)
        return self.process.wait(timeout=60)

    def metric(self, name: str) -> float:
        """Sum of a metric's samples on this process's /metrics."""
        url = f"http://127.0.0.1:{self.port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(name) and not line.startswith("#")
        )

    def serving(self) -> bool:
        try:
            self.metric("lessor_leader")
        except OSError:
            return False
        return True


class Objects:
    """kubectl over one namespace, returning parsed JSON."""

    def __init__(self, cluster: Cluster, namespace: str) -> None:
        self.cluster = cluster
        self.namespace = namespace

    def apply(self, document: Json) -> None:
        document.setdefault("metadata", {})["namespace"] = self.namespace
        self.cluster.kubectl("apply", "-f", "-", input=json.dumps(document))

    def get(self, kind: str, name: str) -> Json | None:
        result = self.cluster.kubectl(
            "get", kind, name, "-n", self.namespace, "-o", "json", check=False
        )
        return json.loads(result.stdout) if result.returncode == 0 else None

    def list(self, kind: str) -> list[Json]:
        result = self.cluster.kubectl("get", kind, "-n", self.namespace, "-o", "json")
        items: list[Json] = json.loads(result.stdout)["items"]
        return items

    def patch(self, kind: str, name: str, patch: Json, *, check: bool = True) -> None:
        self.cluster.kubectl(
            "patch", kind, name, "-n", self.namespace, "--type=merge", "-p", json.dumps(patch),
            check=check,
        )  # fmt: skip

    def pool(self, name: str, **spec: Any) -> None:
        self.apply(
            {
                "apiVersion": "lessor.dev/v1alpha1",
                "kind": "ClusterPool",
                "metadata": {"name": name},
                "spec": {"backend": {"type": "local"}, **spec},
            }
        )

    def lease(self, name: str, pool: str, **spec: Any) -> None:
        self.apply(
            {
                "apiVersion": "lessor.dev/v1alpha1",
                "kind": "ClusterLease",
                "metadata": {"name": name},
                "spec": {"pool": pool, **spec},
            }
        )

    def phase(self, kind: str, name: str) -> str | None:
        obj = self.get(kind, name)
        return (obj or {}).get("status", {}).get("phase")

    def wait_phase(self, name: str, phase: str, timeout: float = 120.0) -> Json:
        """The lease once it reaches `phase`."""

        def probe() -> Json | None:
            lease = self.get("clusterlease", name)
            return lease if lease and lease.get("status", {}).get("phase") == phase else None

        return wait_for(f"lease {name} {phase}", probe, timeout)

    def status(self, kind: str, name: str) -> Json:
        status: Json = (self.get(kind, name) or {}).get("status", {})
        return status

    def pool_status(self, name: str) -> Json:
        return (self.get("clusterpool", name) or {}).get("status", {})

    def backend_healthy(self, pool: str) -> Json:
        """The pool's BackendHealthy condition ({} while it has none)."""
        conditions = self.pool_status(pool).get("conditions", [])
        return next((c for c in conditions if c["type"] == "BackendHealthy"), {})

    def events(self, name: str) -> list[str]:
        """The reasons of the Events about `name`."""
        return [reason for reason, _ in self.event_notes(name)]

    def event_notes(self, name: str) -> list[tuple[str, str]]:
        """(reason, note) of each Event about `name`."""
        result = self.cluster.kubectl(
            "get",
            "events",
            "-n",
            self.namespace,
            f"--field-selector=involvedObject.name={name}",
            "-o",
            "json",
        )
        return [(e["reason"], e.get("message", "")) for e in json.loads(result.stdout)["items"]]


def pids_of(instance: Json) -> list[int]:
    details = instance.get("status", {}).get("backendDetails", {}).get("pids", "")
    return [int(part.split("=")[1]) for part in details.split(",") if "=" in part]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def destroy_local_clusters(backend_dir: Path) -> None:
    """Test cleanup: stop every local cluster the operator left (quarantined ones included)."""
    for directory in every_cluster(backend_dir):
        subprocess.run(["chattr", "-R", "-i", str(directory)], check=False, capture_output=True)
        LocalControlPlane(directory).destroy()


def start_operator(
    cluster: Cluster,
    objects: Objects,
    started: list[Operator],
    tmp_path: Path,
    *,
    leader_election: bool = True,
    extra: tuple[str, ...] = (),
    crash: CrashPoint | None = None,
    teardown_grace: float = Operator.teardown_grace,
) -> Operator:
    operator = Operator(
        kubeconfig=cluster.kubeconfig,
        namespace=objects.namespace,
        backend_dir=tmp_path / "instances",
        log_path=tmp_path / f"operator-{len(started)}.log",
        leader_election=leader_election,
        extra=list(extra),
        teardown_grace=teardown_grace,
    ).start(crash)
    started.append(operator)
    return operator


def kubectl_wait(objects: Objects, target: str, condition: str, timeout: int = 120) -> None:
    """`kubectl wait` as a user or a CI script runs it: it returns when the condition holds,
    for the object's current generation (kubectl compares the condition's observedGeneration)."""
    objects.cluster.kubectl(
        "wait", target, f"--for=condition={condition}", "-n", objects.namespace,
        f"--timeout={timeout}s", timeout=timeout + 30,
    )  # fmt: skip


def warm_instances(objects: Objects, pool: str) -> list[Json]:
    """The pool's clusters a lease could take now: Ready, unleased, not being deleted."""
    return [
        i for i in objects.list("clusterinstances")
        if i["spec"]["pool"] == pool and not i["spec"].get("claimRef")
        and i.get("status", {}).get("phase") == "Ready"
        and not i["metadata"].get("deletionTimestamp")
    ]  # fmt: skip
