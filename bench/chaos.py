"""Chaos soak: lease operations while the operator, both API servers and kube-apiserver are
killed and restarted under them; then what went wrong, counted. A soak reports; it never passes
or fails. The issue's goal: no double binds, no leaks, no lost or stuck leases, and no 5xx but a
503 with Retry-After.

The stack is bench.stack's (a local control plane with a kwok node, lessor's CRDs, an
AccessPolicy with a static token, the operator with `--test-backends`) with two API servers on
ports of their own, as two replicas behind a load balancer would be; every process of lessor
runs in a session of its own, so a kill takes a whole gunicorn (master and workers) at once, as
a crashed pod would. One ClusterPool of the test-only `namespace` backend (an instance is a
namespace with an admin ServiceAccount), warmTarget 10.

`--clients` threads share `--operations` lease operations. One operation: POST /v1/leases
(202), GET it every 50 ms until Bound with a kubeconfig (120 s at most, else *stuck*), use the
kubeconfig (`kubectl get serviceaccounts` in its namespace), PATCH {"extend_ttl": "10m"},
DELETE. Every request goes to one of the two servers at random. A connection error or a 5xx is
retried for up to 30 s (after Retry-After, else 0.5 s); every 5xx a client sees is counted, and
apart those that were not a 503 with Retry-After.

Chaos runs in the main thread (processes it starts must not be tied to a thread that ends):
the i-th of n events of one kind fires once (i + phase) / n of the operations have been
started, a phase of its own per kind so that kinds interleave. The spacing so scales with
`--operations`, every event lands while clients work however slow the machine is, and an event
never fires before the last one's process serves again. Events: SIGKILL the operator (its
restart waits out the leader-election lease, 15 s, as a real one would); SIGKILL one API server;
SIGKILL kube-apiserver and start it again with the argv read from /proc and the same port
(its record in the control plane's state.json updated, so that stopping the control plane stops
the new process). A process that exits on its own (the operator exits when it loses leadership
while kube-apiserver is down) is restarted, as a kubelet would, and reported.

How each failure is found:

- double binds, three ways. (1) A watch of ClusterLeases (list, then watch; relisted after a
  break) replays their changes in the order etcd made them: two leases Bound to the same
  instance uid at once in that order are a double bind. (2) An instance is never handed out
  twice (the operator only ever adds a `spec.claimRef`, and destroys a claimed instance after
  its lease), so an instance uid in `status.instance` of two leases, ever, or two different
  `spec.claimRef` uids of one ClusterInstance, ever, counts too: it also catches what a watch
  gap hid. (3) From the clients' side: the namespace of each kubeconfig,
  held from the moment its lease was seen Bound until its DELETE was answered; two such spans
  of one namespace that overlap (monotonic time of this process) were two tenants in one
  cluster.
- lost leases: a 404 for a lease (GET, PATCH or DELETE) before its owner released it; a 404
  later contradicted by a 200 is reported apart, as a transient 404.
- stuck leases: not Bound with a kubeconfig within 120 s of the POST, or, after the clients
  are done, everything is released and the operator had 120 s to settle, a ClusterLease not
  Released or Expired.
- leaked instances, after settling: ClusterInstances of the pool beyond warmTarget, instance
  namespaces (`lessor-ns-*`) whose instance uid label names no ClusterInstance, and Ready
  instances without their namespace.
- leaked processes: after the stack stopped, any process whose command line names the run's
  directory (what the watchdog would stop), but the watchdog itself.

Usage: python -m bench.chaos [--operations 500] [--clients 10] [--operator-kills 50]
       [--api-kills 10] [--kube-restarts 3] [--keep-logs DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import http.client
import itertools
import json
import math
import os
import random
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bench.stack import NAMESPACE, TOKEN, Client, configure, percentiles, progress
from lessor.apiserver.state.replica_db import DIRECTORY_ENV
from lessor.controlplane.binaries import ensure_binaries
from lessor.controlplane.cluster import LocalControlPlane
from lessor.controlplane.ports import PortReservation
from lessor.controlplane.processes import (
    ProcessRecord,
    processes_mentioning,
    spawn,
    terminate,
)
from lessor.controlplane.watchdog import watch_over

POOL = "chaos"
WARM = 10
BOUND_WITHIN = 120.0  # seconds from POST to Bound with a kubeconfig, else the lease is stuck
RETRY_FOR = 30.0  # seconds a request is retried through connection errors and 5xx
POLL = 0.05
SETTLE = 120.0
ENDED = frozenset({"Released", "Expired"})
RESULTS = Path(__file__).resolve().parent / "results"
# Where each kind's events fall within its 1/n slices of the run, so that kinds interleave.
PHASES = {"operator": 0.5, "api-0": 0.3, "api-1": 0.7, "kube-apiserver": 0.45}
# kubectl's words for a kube-apiserver that is restarting: the use is retried, not failed.
UNREACHABLE = (
    "connection refused",
    "unable to connect",
    "eof",
    "connection reset",
    "i/o timeout",
    "tls handshake",
    "serviceunavailable",
    "currently unable to handle",
    "context deadline exceeded",
)
# Error lines: lessor's log lines (lessor.logs, logfmt) at error or above, a 5xx in the API's
# request lines, and a traceback printed raw (a process that died before its logging was set up).
ERROR_MARKERS = (
    "level=error",
    "level=critical",
    *(f" status={code}" for code in (500, 502, 503, 504)),
    "Traceback (most recent call last)",
)
# The exception of a logged failure: the `error` field, a quoted string, last on its line.
LOGGED_ERROR = re.compile(r' error=("(?:[^"\\]|\\.)*")$')

Json = dict[str, Any]


def _since(start: float) -> float:
    return round(time.monotonic() - start, 2)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:  # noqa: S310 - our loopback URLs
            return bool(answer.status == 200)
    except (OSError, urllib.error.HTTPError):
        return False


def _hold(port: int, timeout: float = 5.0) -> socket.socket | None:
    """Bind `port` without listening (as lessor.controlplane.ports does) once the killed
    process let it go, so that no outgoing connection takes it before the restarted process
    listens on it again (with SO_REUSEADDR, beside this socket); None if it never came free."""
    deadline = time.monotonic() + timeout
    while True:
        holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            holder.bind(("127.0.0.1", port))
        except OSError:
            holder.close()
            if time.monotonic() > deadline:
                return None
            time.sleep(0.05)
        else:
            return holder


# -- the processes the run kills ------------------------------------------------------------


@dataclass
class Restartable:
    """A lessor process (`python -m <argv>`) in a session of its own: a kill reaches the whole
    group (a gunicorn master and its workers), and a restart runs the same argv. Each start gets
    fresh metrics and replica directories under the run's tree, as a new pod would."""

    name: str
    argv: list[str]
    work: Path
    probe: str  # a URL that answers 200 once the process serves
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def log(self) -> Path:
        return self.work / "logs" / f"{self.name}.log"

    def start(self, why: str) -> None:
        state = self.work / "run" / f"{self.name}-{self.starts}"
        env = dict(os.environ)
        for variable, sub in (("PROMETHEUS_MULTIPROC_DIR", "metrics"), (DIRECTORY_ENV, "replica")):
            (state / sub).mkdir(parents=True)
            env[variable] = str(state / sub)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as log:
            log.write(
                f"----- bench.chaos: start {self.starts} of {self.name}: {why} -----\n".encode()
            )
            log.flush()
            self.process = subprocess.Popen(
                [sys.executable, "-m", *self.argv],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                env=env,
            )
        self.starts += 1

    def signal_group(self, sig: signal.Signals) -> None:
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)

    def kill(self) -> None:
        """SIGKILL the group and reap the process."""
        self.signal_group(signal.SIGKILL)
        if self.process is not None:
            self.process.wait()

    def stop(self) -> None:
        """SIGTERM (a drained shutdown), SIGKILL what is left after 60 s."""
        if self.process is None:
            return
        self.signal_group(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=60)
        self.kill()  # the master may be gone and a worker not

    def exited(self) -> int | None:
        return None if self.process is None else self.process.poll()


class ChaosStack:
    """The control plane, the operator and two API servers, and what kills them."""

    def __init__(self, work: Path, binaries: Path) -> None:
        self.work = work
        self.binaries = binaries
        self.cluster = LocalControlPlane(work / "cluster")
        # Held for the whole run (lessor.controlplane.ports): a restarted process finds its
        # port free whatever else ran on the machine meanwhile.
        self.ports = PortReservation()
        self.operator: Restartable | None = None
        self.apis: list[Restartable] = []
        self.events: list[Json] = []
        self.own_exits: list[Json] = []
        self.findings: Json = {}
        self.began = time.monotonic()

    @property
    def bases(self) -> list[str]:
        return [api.probe.removesuffix("/healthz") for api in self.apis]

    @property
    def kubectl_binary(self) -> str:
        return str(self.binaries / "kubectl")

    def start(self) -> None:
        self.cluster.start(self.binaries, with_node=True, progress=progress)
        configure(self.cluster, Ed25519PrivateKey.generate())
        common = [f"--kubeconfig={self.cluster.kubeconfig}", f"--namespace={NAMESPACE}"]
        port = self.ports.take()
        self.operator = Restartable(
            "operator",
            ["lessor.operator", *common, "--http-host=127.0.0.1", f"--http-port={port}",
             f"--local-backend-dir={self.work / 'instances'}", "--test-backends"],
            self.work, f"http://127.0.0.1:{port}/readyz",
        )  # fmt: skip
        for index in range(2):
            port = self.ports.take()
            self.apis.append(
                Restartable(
                    f"api-{index}",
                    # The flags of bench.stack.local_stack: the soak measures the server, not
                    # the admission limit or load shedding.
                    ["lessor.apiserver", *common, f"--bind=127.0.0.1:{port}",
                     f"--ssh-audience=http://127.0.0.1:{port}", "--workers=2",
                     "--worker-connections=2000", "--lease-admission-rate=1000000",
                     "--lease-admission-burst=1000000", "--max-in-flight=1000000"],
                    self.work, f"http://127.0.0.1:{port}/healthz",
                )
            )  # fmt: skip
        for process in (self.operator, *self.apis):
            process.start("stack start")
        for process in (self.operator, *self.apis):
            if not self.until(partial(_answers, process.probe), 120):
                raise TimeoutError(f"{process.name} did not start; see {process.log}")

    def stop(self, keep_logs: Path | None) -> None:
        for process in (*self.apis, *([self.operator] if self.operator else [])):
            process.stop()
        self.ports.release()
        logs = {p.name: p.log for p in (*self.apis, *([self.operator] if self.operator else []))}
        logs |= {f"cluster/{p.stem}": p for p in sorted(self.cluster.logs.glob("*.log"))}
        self.findings = log_findings(logs)
        if keep_logs is not None:
            keep_logs.mkdir(parents=True, exist_ok=True)
            for name, path in logs.items():
                if path.exists():
                    shutil.copy(path, keep_logs / f"{name.replace('/', '-')}.log")
        self.cluster.destroy()

    # -- supervision -----------------------------------------------------------------------

    def supervise(self) -> None:
        """Restart a process that exited on its own, as a kubelet would, and note it."""
        for process in (*([self.operator] if self.operator else []), *self.apis):
            code = process.exited()
            if code is not None:
                self.own_exits.append({"at_s": _since(self.began), "name": process.name,
                                       "code": code})  # fmt: skip
                progress(f"{process.name} exited on its own ({code}); restarting it")
                process.kill()  # whatever of its group is left
                process.start(f"exited on its own with {code}")

    def until(self, probe: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not probe():
            if time.monotonic() > deadline:
                return False
            self.supervise()
            time.sleep(0.2)
        return True

    # -- chaos -----------------------------------------------------------------------------

    def fire(self, kind: str, clients_running: bool) -> None:
        started = time.monotonic()
        if kind == "kube-apiserver":
            recovered = self.restart_kube_apiserver()
        else:
            process = self.operator if kind == "operator" else self.apis[int(kind[-1])]
            assert process is not None
            process.kill()
            process.start("SIGKILLed by bench.chaos")
            recovered = self.until(lambda: _answers(process.probe), 120)
        self.events.append({
            "at_s": round(started - self.began, 2), "what": f"{kind} killed",
            "serving_again_s": _since(started) if recovered else None,
            "clients_running": clients_running,
        })  # fmt: skip
        progress(f"chaos: {kind} killed and restarted ({_since(started)} s)")

    def restart_kube_apiserver(self) -> bool:
        """SIGKILL kube-apiserver and run its argv again on its port; whether it serves again
        within 120 s. LocalControlPlane records pids, not argvs: the argv comes from /proc."""
        state = self.cluster.state()
        assert state is not None
        index, record = next(
            (i, r) for i, r in enumerate(state.processes) if r.name == "kube-apiserver"
        )
        raw = Path(f"/proc/{record.pid}/cmdline").read_bytes()
        argv = [part.decode() for part in raw.split(b"\0") if part]
        os.kill(record.pid, signal.SIGKILL)
        while record.is_running():
            time.sleep(0.02)
        terminate(record)  # reaps it
        port = state.ports["apiserver"]
        for _attempt in range(3):
            holder = _hold(port)
            # Detached: spawn's preexec_fn (the parent-death signal) is not safe to run while
            # the client threads run; the watchdog and stop() end the process all the same.
            record = spawn("kube-apiserver", argv, self.cluster.logs / "kube-apiserver.log",
                           detached=True)  # fmt: skip
            state.processes[index] = record
            state.save(self.cluster.state_path)

            def up(started: ProcessRecord = record) -> bool:
                return self.cluster.is_ready() or not started.is_running()

            served = self.until(up, 120)
            if holder is not None:
                holder.close()
            if served and record.is_running():
                return True
            terminate(record)
        return False


def log_findings(logs: dict[str, Path], samples: int = 5) -> Json:
    """Error lines of each log, counted by marker, with a few distinct ones; and the exception
    each traceback ended in (its last line), counted: what a reader of the report needs first
    to tell a retried outage (a refused connection) from a bug."""
    found: Json = {}
    for name, path in logs.items():
        if not path.exists():
            continue
        counts: Counter[str] = Counter()
        exceptions: Counter[str] = Counter()
        seen: dict[str, str] = {}
        in_traceback = False
        for line in path.read_text(errors="replace").splitlines():
            if in_traceback and line and not line[0].isspace():
                in_traceback = line.startswith("Traceback")
                if not in_traceback:
                    exceptions[line[:200]] += 1
            marker = next((m for m in ERROR_MARKERS if m in line), None)
            if marker is None:
                continue
            if logged := LOGGED_ERROR.search(line):
                exceptions[json.loads(logged.group(1)).rstrip().rsplit("\n", 1)[-1][:200]] += 1
            in_traceback |= line.startswith("Traceback")
            counts[marker.strip()] += 1
            key = line.split(" level=", 1)[-1][:120]
            if len(seen) < samples and key not in seen and not marker.startswith("Traceback"):
                seen[key] = line[:400]
        if counts:
            found[name] = {
                "counts": dict(counts),
                "samples": list(seen.values()),
                "exceptions": dict(exceptions.most_common(10)),
            }
    return found


# -- HTTP -----------------------------------------------------------------------------------


@dataclass
class Answer:
    status: int
    body: Any
    # An earlier attempt may have reached the server (a 5xx, or a connection broken after the
    # request was sent): a create may exist twice, a release may already be done.
    uncertain: bool


@dataclass
class Tally:
    """What every client saw of the servers, shared by the client threads."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    by_code: Counter[str] = field(default_factory=Counter)
    retry_after_503: int = 0
    other_5xx: Counter[str] = field(default_factory=Counter)
    connection_errors: Counter[str] = field(default_factory=Counter)
    gave_up: Counter[str] = field(default_factory=Counter)
    samples: dict[str, str] = field(default_factory=dict)

    def server_error(self, status: int, retry_after: bool, request: str, body: Any) -> None:
        with self.lock:
            self.by_code[str(status)] += 1
            if status == 503 and retry_after:
                self.retry_after_503 += 1
                return
            self.other_5xx[f"{status} {request}"] += 1
            text = json.dumps(body)[:300] if not isinstance(body, str) else body[:300]
            self.samples.setdefault(
                f"{status} {request} {text[:80]}", f"{status} {request}: {text}"
            )

    def count(self, counter: Counter[str], key: str) -> None:
        with self.lock:
            counter[key] += 1

    def report(self) -> Json:
        return {
            "by_code": dict(self.by_code),
            "total": sum(self.by_code.values()),
            "503_with_retry_after": self.retry_after_503,
            "other_than_503_with_retry_after": sum(self.other_5xx.values()),
            "other_by_request": dict(self.other_5xx),
            "other_samples": list(self.samples.values())[:10],
            "connection_errors_by_method": dict(self.connection_errors),
            "requests_given_up_after_30s": dict(self.gave_up),
        }


def _route(method: str, path: str) -> str:
    parts = path.split("/")
    if len(parts) > 3 and parts[2] == "leases":
        parts[3] = ":id"
    return f"{method} {'/'.join(parts)}"


class Api:
    """One client thread's view of both API servers: a kept-alive connection to each, a server
    picked at random for every request, retries through connection errors and 5xx."""

    def __init__(self, bases: list[str], tally: Tally) -> None:
        self.tally = tally
        self.addresses = [urlsplit(base) for base in bases]
        self.connections: list[http.client.HTTPConnection | None] = [None] * len(bases)
        self.used = [0] * len(bases)

    def _connection(self, index: int) -> http.client.HTTPConnection:
        found = self.connections[index]
        if found is None:
            address = self.addresses[index]
            found = http.client.HTTPConnection(address.hostname or "", address.port, timeout=60)
            self.connections[index], self.used[index] = found, 0
        return found

    def _try(
        self, index: int, method: str, path: str, data: bytes | None
    ) -> tuple[int, Any, str | None] | Exception:
        """(status, body, Retry-After) of one request, or what broke it."""
        headers = {"Authorization": f"Bearer {TOKEN}"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        connection = self._connection(index)
        try:
            connection.request(method, path, body=data, headers=headers)
            answer = connection.getresponse()
            raw = answer.read()
            is_json = (answer.getheader("Content-Type") or "").startswith("application/json")
            body = json.loads(raw) if raw and is_json else raw.decode(errors="replace")
        except (OSError, http.client.HTTPException, ValueError) as error:
            connection.close()
            self.connections[index] = None
            return error
        self.used[index] += 1
        return answer.status, body, answer.getheader("Retry-After")

    def call(self, method: str, path: str, body: Any = None) -> Answer | None:
        """The first answer below 500, or None once 30 s of retries did not get one."""
        data = json.dumps(body).encode() if body is not None else None
        deadline = time.monotonic() + RETRY_FOR
        uncertain = False
        while True:
            index = random.randrange(len(self.addresses))  # noqa: S311 - not for security
            reused = self.connections[index] is not None and self.used[index] > 0
            result = self._try(index, method, path, data)
            if isinstance(result, Exception) and reused:
                # A kept-alive connection the server closed (idle, or its process died): once
                # more at once on a fresh one, as any HTTP client does; counted if that fails.
                result = self._try(index, method, path, data)
            wait = 0.5
            if isinstance(result, Exception):
                uncertain |= not isinstance(result, ConnectionRefusedError)
                self.tally.count(self.tally.connection_errors, method)
            else:
                status, answer, retry_after = result
                if status < 500:
                    return Answer(status, answer, uncertain)
                uncertain = True
                self.tally.server_error(
                    status, retry_after is not None, _route(method, path), answer
                )
                if status == 503 and retry_after is not None:
                    wait = _retry_after(retry_after)
            if time.monotonic() + wait > deadline:
                self.tally.count(self.tally.gave_up, _route(method, path))
                return None
            time.sleep(wait)


def _retry_after(value: str) -> float:
    """Retry-After in seconds (the API sends delta-seconds), within 0.1-5 s."""
    try:
        return min(5.0, max(0.1, float(value)))
    except ValueError:
        return 0.5


def _said(answer: Answer | None) -> str:
    if answer is None:
        return "no answer below 500 within 30 s"
    text = answer.body if isinstance(answer.body, str) else json.dumps(answer.body)
    return f"HTTP {answer.status} {text[:160]}"


# -- the clients ----------------------------------------------------------------------------


@dataclass
class Operation:
    """One lease's life as its client saw it; times are this process's monotonic clock."""

    index: int
    lease: str | None = None
    posted: float = 0.0
    bound: float | None = None  # first GET that showed Bound with a kubeconfig
    released: float | None = None  # DELETE answered
    namespace: str | None = None  # the kubeconfig's: which instance the client was handed
    failures: list[str] = field(default_factory=list)
    not_found: int = 0  # 404s before the client released the lease
    found_after_not_found: bool = False
    create_uncertain: bool = False  # the 202 came after a retry that may have created one too
    stuck: bool = False

    @property
    def outcome(self) -> str:
        return self.failures[0][:160] if self.failures else "completed"


class Work:
    """The operations still to start, handed out one at a time to whichever client is free."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.started = 0
        self.done: list[Operation] = []
        self.lock = threading.Lock()

    def take(self) -> int | None:
        with self.lock:
            if self.started >= self.total:
                return None
            self.started += 1
            return self.started - 1

    def finish(self, operation: Operation) -> None:
        with self.lock:
            self.done.append(operation)
            count = len(self.done)
        if count % max(1, self.total // 10) == 0:
            progress(f"{count}/{self.total} operations done")


class Tenant:
    """One client thread: lease operations until none is left."""

    def __init__(
        self, stack: ChaosStack, tally: Tally, work: Work, stopping: threading.Event
    ) -> None:
        self.api = Api(stack.bases, tally)
        self.tally = tally
        self.kubectl = stack.kubectl_binary
        self.scratch = stack.work / "kubeconfigs"
        self.work = work
        self.stopping = stopping
        self.kubectl_retries = 0

    def run(self) -> None:
        while not self.stopping.is_set() and (index := self.work.take()) is not None:
            operation = Operation(index)
            try:
                self.cycle(operation)
            except Exception as error:  # a bug of this script: reported, not lost
                operation.failures.append(f"client: {error!r}")
            self.work.finish(operation)

    def cycle(self, op: Operation) -> None:
        op.posted = time.monotonic()
        created = self.api.call("POST", "/v1/leases", {"profile": POOL})
        if created is None or created.status != 202 or not isinstance(created.body, dict):
            op.failures.append(f"create: {_said(created)}")
            return
        op.lease, op.create_uncertain = str(created.body["id"]), created.uncertain
        try:
            kubeconfig = self.wait_bound(op)
            if kubeconfig is not None:
                self.use(op, kubeconfig)
                self.extend(op)
        finally:
            self.release(op)

    def saw(self, op: Operation, answer: Answer) -> None:
        if answer.status == 404:
            op.not_found += 1
        elif answer.status < 300 and op.not_found:
            op.found_after_not_found = True

    def wait_bound(self, op: Operation) -> str | None:
        """The kubeconfig, once a GET shows the lease Bound with one; None when it is stuck."""
        deadline = op.posted + BOUND_WITHIN
        while not self.stopping.is_set():
            answer = self.api.call("GET", f"/v1/leases/{op.lease}")
            if answer is not None:
                self.saw(op, answer)
                body = answer.body if answer.status == 200 and isinstance(answer.body, dict) else {}
                phase = body.get("phase")
                if phase == "Bound" and body.get("kubeconfig"):
                    op.bound = time.monotonic()
                    return str(body["kubeconfig"])
                if phase in {*ENDED, "Quarantined"}:
                    op.failures.append(f"bind: the lease ended {phase} before it was Bound")
                    return None
            if time.monotonic() > deadline:
                op.stuck = True
                op.failures.append(f"bind: not Bound within {BOUND_WITHIN:g} s")
                return None
            time.sleep(POLL)
        return None

    def use(self, op: Operation, kubeconfig: str) -> None:
        """A read the namespace backend's ServiceAccount may do, with the lease's kubeconfig;
        retried while kube-apiserver is being restarted, failed on any other error."""
        document = yaml.safe_load(kubeconfig)
        current = document.get("current-context")
        context = next(c["context"] for c in document["contexts"] if c["name"] == current)
        op.namespace = str(context.get("namespace") or "default")
        path = self.scratch / f"{op.lease}.kubeconfig"
        path.write_text(kubeconfig)
        argv = [self.kubectl, "--kubeconfig", str(path), "get", "serviceaccounts", "-n",
                op.namespace, "-o", "name", "--request-timeout=20s"]  # fmt: skip
        deadline = time.monotonic() + RETRY_FOR
        try:
            while True:
                try:
                    result = subprocess.run(
                        argv, capture_output=True, text=True, timeout=60, check=False
                    )
                    error = result.stderr.strip() if result.returncode else ""
                except subprocess.TimeoutExpired:
                    error = "kubectl: i/o timeout (60 s)"
                if not error:
                    return
                if any(word in error.lower() for word in UNREACHABLE):
                    self.kubectl_retries += 1
                    if time.monotonic() < deadline:
                        time.sleep(0.5)
                        continue
                op.failures.append(f"use: {error[:300]}")
                return
        finally:
            path.unlink(missing_ok=True)

    def extend(self, op: Operation) -> None:
        answer = self.api.call("PATCH", f"/v1/leases/{op.lease}", {"extend_ttl": "10m"})
        if answer is not None:
            self.saw(op, answer)
        if answer is None or answer.status != 200:
            op.failures.append(f"extend: {_said(answer)}")

    def release(self, op: Operation) -> None:
        answer = self.api.call("DELETE", f"/v1/leases/{op.lease}")
        # A 404 after an attempt that may have gone through is that attempt's success.
        if answer is not None and (
            answer.status in (200, 202, 204) or (answer.status == 404 and answer.uncertain)
        ):
            op.released = time.monotonic()
            return
        if answer is not None:
            self.saw(op, answer)
        op.failures.append(f"release: {_said(answer)}")


# -- what the cluster saw -------------------------------------------------------------------


class LeaseLedger:
    """ClusterLeases in the order of their changes (a watch): which lease is Bound to which
    instance at each point of that order, and every instance a lease ever named."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.current: dict[str, tuple[str | None, str | None]] = {}  # name: (phase, uid)
        self.bound: defaultdict[str, set[str]] = defaultdict(set)  # instance uid: leases
        self.ever: defaultdict[str, set[str]] = defaultdict(set)  # instance uid: leases
        self.names: dict[str, str] = {}  # instance uid: name
        self.overlaps: dict[frozenset[str], Json] = {}

    def seen(self, obj: Json) -> None:
        status = obj.get("status") or {}
        instance = status.get("instance") or {}
        uid = instance.get("uid")
        if uid:
            self.names[uid] = instance.get("name", uid)
        self._set(obj["metadata"]["name"], status.get("phase"), uid)

    def gone(self, obj: Json) -> None:
        self._set(obj["metadata"]["name"], None, None, deleted=True)

    def relisted(self, items: list[Json]) -> None:
        listed = {obj["metadata"]["name"] for obj in items}
        for name in [n for n in self.current if n not in listed]:
            self._set(name, None, None, deleted=True)
        for obj in items:
            self.seen(obj)

    def _set(self, name: str, phase: str | None, uid: str | None, deleted: bool = False) -> None:
        with self.lock:
            _old_phase, old_uid = self.current.get(name, (None, None))
            if old_uid:
                self.bound[old_uid].discard(name)
            if deleted:
                self.current.pop(name, None)
                return
            self.current[name] = (phase, uid)
            if uid:
                self.ever[uid].add(name)
            if phase == "Bound" and uid:
                holders = self.bound[uid]
                holders.add(name)
                if len(holders) > 1:
                    key = frozenset(holders)
                    self.overlaps[key] = {"instance": self.names.get(uid, uid),
                                          "leases": sorted(holders)}  # fmt: skip

    def several(self) -> list[Json]:
        with self.lock:
            return [
                {"instance": self.names.get(uid, uid), "leases": sorted(leases)}
                for uid, leases in self.ever.items()
                if len(leases) > 1
            ]


class InstanceLedger:
    """Every ClusterInstance of the run and every lease (uid) its claimRef ever named."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.claims: defaultdict[str, set[str]] = defaultdict(set)
        self.names: dict[str, str] = {}

    def seen(self, obj: Json) -> None:
        uid = obj["metadata"]["uid"]
        claim = (obj.get("spec") or {}).get("claimRef") or {}
        with self.lock:
            self.names[uid] = obj["metadata"]["name"]
            if claim.get("uid"):
                self.claims[uid].add(claim["uid"])

    def gone(self, obj: Json) -> None:
        self.seen(obj)

    def relisted(self, items: list[Json]) -> None:
        for obj in items:
            self.seen(obj)

    def several(self) -> list[Json]:
        with self.lock:
            return [
                {"instance": self.names[uid], "claim_uids": sorted(claims)}
                for uid, claims in self.claims.items()
                if len(claims) > 1
            ]


class WatchRestartError(Exception):
    """The watch must start again from a list (410 Gone, an error event, a bad answer)."""


class Watch(threading.Thread):
    """List, then watch one collection on kube-apiserver as the admin, into a ledger; lists
    again after any break (kube-apiserver restarts break it on purpose)."""

    def __init__(self, cluster: LocalControlPlane, plural: str, ledger: Any) -> None:
        super().__init__(daemon=True, name=f"watch {plural}")
        pki = cluster.pki
        self.context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        self.context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        self.port = urlsplit(cluster.server).port
        self.path = f"/apis/lessor.dev/v1alpha1/namespaces/{NAMESPACE}/{plural}"
        self.ledger = ledger
        self.stopping = threading.Event()
        self.connection: http.client.HTTPSConnection | None = None
        self.lists = 0

    def _get(self, query: str) -> http.client.HTTPResponse:
        self.connection = http.client.HTTPSConnection(
            "127.0.0.1", self.port, context=self.context, timeout=60
        )
        self.connection.request("GET", f"{self.path}?{query}")
        answer = self.connection.getresponse()
        if answer.status != 200:
            raise WatchRestartError(f"HTTP {answer.status}")
        return answer

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                listed = json.loads(self._get("limit=100000").read())
                self.ledger.relisted(listed["items"])
                self.lists += 1
                version = listed["metadata"]["resourceVersion"]
                while not self.stopping.is_set():
                    version = self._follow(version)
            except (OSError, http.client.HTTPException, ValueError, KeyError, WatchRestartError):
                if not self.stopping.is_set():
                    time.sleep(0.5)
            finally:
                if self.connection is not None:
                    self.connection.close()

    def _follow(self, version: str) -> str:
        query = f"watch=1&allowWatchBookmarks=true&timeoutSeconds=30&resourceVersion={version}"
        answer = self._get(query)
        while line := answer.readline():
            event = json.loads(line)
            obj = event["object"]
            if event["type"] == "ERROR":
                raise WatchRestartError(str(obj.get("message")))
            version = obj["metadata"]["resourceVersion"]
            if event["type"] == "DELETED":
                self.ledger.gone(obj)
            elif event["type"] in ("ADDED", "MODIFIED"):
                self.ledger.seen(obj)
        return version

    def stop(self) -> None:
        self.stopping.set()
        connection = self.connection
        if connection is not None and connection.sock is not None:
            with contextlib.suppress(OSError):
                connection.sock.shutdown(socket.SHUT_RDWR)
        self.join(timeout=60)


@dataclass
class Snapshot:
    """The pool's objects after the run, as listed at one moment."""

    leases: list[Json]
    instances: list[Json]
    namespaces: list[Json]

    def unended(self) -> list[Json]:
        return [
            {"lease": obj["metadata"]["name"], "phase": (obj.get("status") or {}).get("phase")}
            for obj in self.leases
            if (obj.get("status") or {}).get("phase") not in ENDED
        ]

    def orphan_namespaces(self) -> list[Json]:
        uids = {obj["metadata"]["uid"] for obj in self.instances}
        return [
            {"namespace": ns["metadata"]["name"], "phase": (ns.get("status") or {}).get("phase")}
            for ns in self.namespaces
            if (ns["metadata"].get("labels") or {}).get("lessor.dev/instance-uid") not in uids
        ]

    def ready_without_namespace(self) -> list[str]:
        labelled = {
            (ns["metadata"].get("labels") or {}).get("lessor.dev/instance-uid")
            for ns in self.namespaces
        }
        return [
            obj["metadata"]["name"]
            for obj in self.instances
            if _phase(obj) == "Ready" and obj["metadata"]["uid"] not in labelled
        ]

    def settled(self) -> bool:
        return (
            not self.unended()
            and len(self.instances) == WARM
            and all(_phase(obj) == "Ready" for obj in self.instances)
            and not self.orphan_namespaces()
            and not self.ready_without_namespace()
        )

    def leaks(self) -> Json:
        phases = Counter(str(_phase(obj)) for obj in self.instances)
        return {
            "instances": len(self.instances),
            "instances_by_phase": dict(phases),
            "beyond_warm_target": max(0, len(self.instances) - WARM),
            "instance_namespaces": len(self.namespaces),
            "namespaces_without_instance": self.orphan_namespaces(),
            "ready_instances_without_namespace": self.ready_without_namespace(),
        }


def _phase(obj: Json) -> str | None:
    phase = (obj.get("status") or {}).get("phase")
    return str(phase) if phase is not None else None


def snapshot(cluster: LocalControlPlane) -> Snapshot | None:
    def items(*args: str) -> list[Json] | None:
        result = cluster.kubectl("get", *args, "-o", "json", check=False, timeout=60)
        if result.returncode != 0:
            return None
        found: list[Json] = json.loads(result.stdout)["items"]
        return found

    leases = items("clusterleases", "-n", NAMESPACE)
    instances = items("clusterinstances", "-n", NAMESPACE)
    namespaces = items("namespaces")
    if leases is None or instances is None or namespaces is None:
        return None
    return Snapshot(
        leases,
        [obj for obj in instances if obj["spec"].get("pool") == POOL],
        [ns for ns in namespaces if ns["metadata"]["name"].startswith("lessor-ns-")],
    )


def client_overlaps(operations: list[Operation], end: float) -> list[Json]:
    """Two leases whose clients held the same namespace at once: from the GET that showed one
    Bound until its DELETE was answered (until the end when it never was)."""
    spans: defaultdict[str, list[tuple[float, float, str]]] = defaultdict(list)
    for op in operations:
        if op.namespace and op.bound is not None and op.lease:
            spans[op.namespace].append((op.bound, op.released or end, op.lease))
    found = []
    for namespace, held in spans.items():
        for first, second in itertools.combinations(sorted(held), 2):
            if second[0] < first[1]:
                found.append({"namespace": namespace, "leases": [first[2], second[2]]})
    return found


def leftover_processes(work: Path) -> list[Json]:
    """Processes naming the run's tree (the watchdog's own test) but the watchdog itself."""
    found = []
    for pid in processes_mentioning(str(work)):
        if pid == os.getpid():
            continue
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "lessor.controlplane.watchdog" not in command:
            found.append({"pid": pid, "command": command.strip()[:300]})
    return found


# -- the run --------------------------------------------------------------------------------


def schedule(operations: int, counts: dict[str, int]) -> list[tuple[int, str]]:
    """(operations started, kind) of every chaos event, in order."""
    plan = [
        (max(1, math.ceil((i + PHASES[kind]) / n * operations)), kind)
        for kind, n in counts.items()
        for i in range(n)
    ]
    return sorted(plan)


def drive(stack: ChaosStack, plan: list[tuple[int, str]], clients: list[threading.Thread],
          work: Work) -> None:  # fmt: skip
    """Fire each event once its share of the operations has started (all of them, should the
    clients be done first), restarting whatever exits on its own meanwhile."""
    pending = list(plan)
    while True:
        running = any(thread.is_alive() for thread in clients)
        if pending and (work.started >= pending[0][0] or not running):
            stack.fire(pending.pop(0)[1], running)
        elif running:
            stack.supervise()
            time.sleep(0.1)
        else:
            return


def settle(stack: ChaosStack, known: set[str]) -> tuple[Snapshot | None, Json]:
    """Release every lease still active (those a client could not, and those made by a create
    retried after it had gone through), then wait up to 120 s for the operator to settle."""
    started = time.monotonic()
    tally = Tally()
    api = Api(stack.bases, tally)
    listed = api.call("GET", "/v1/leases")
    active = listed.body if listed is not None and isinstance(listed.body, list) else []
    for lease in active:
        api.call("DELETE", f"/v1/leases/{lease['id']}")
    found: list[Snapshot | None] = [None]

    def settled() -> bool:
        found[0] = snapshot(stack.cluster) or found[0]
        return found[0] is not None and found[0].settled()

    done = stack.until(settled, SETTLE)
    final = found[0]
    unknown = [] if final is None else [
        obj["metadata"]["name"] for obj in final.leases if obj["metadata"]["name"] not in known
    ]  # fmt: skip
    return final, {
        "released_at_the_end": len(active),
        "settled": done,
        "settle_s": _since(started),
        "leases_no_client_knew": unknown,
        "http_5xx_while_releasing": tally.report()["by_code"],
    }


def soak(stack: ChaosStack, args: argparse.Namespace) -> Json:
    stack.cluster.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "lessor.dev/v1alpha1", "kind": "ClusterPool",
        "metadata": {"name": POOL, "namespace": NAMESPACE},
        "spec": {"warmTarget": WARM, "ttl": "30m", "backend": {"type": "namespace"}},
    }))  # fmt: skip
    progress(f"waiting for {WARM} warm namespace instances")
    setup = Client(stack.bases[0], lambda *_: f"Bearer {TOKEN}")

    def warm() -> bool:
        try:
            status, body = setup.call("GET", f"/v1/pools/{POOL}")
        except OSError:
            return False
        return status == 200 and int(body.get("ready", 0)) >= WARM

    if not stack.until(warm, 600):
        raise TimeoutError(f"pool {POOL} never had {WARM} ready instances")
    leases, instances = LeaseLedger(), InstanceLedger()
    watches = [Watch(stack.cluster, "clusterleases", leases),
               Watch(stack.cluster, "clusterinstances", instances)]  # fmt: skip
    tally, work, stopping = Tally(), Work(args.operations), threading.Event()
    (stack.work / "kubeconfigs").mkdir()
    tenants = [Tenant(stack, tally, work, stopping) for _ in range(args.clients)]
    clients = [threading.Thread(target=t.run, daemon=True, name=f"client {n}")
               for n, t in enumerate(tenants)]  # fmt: skip
    counts = {"operator": args.operator_kills, "api-0": args.api_kills, "api-1": args.api_kills,
              "kube-apiserver": args.kube_restarts}  # fmt: skip
    try:
        for watch in watches:
            watch.start()
        progress(f"soak: {args.operations} operations, {args.clients} clients, chaos {counts}")
        began = stack.began = time.monotonic()  # events are timed from here
        for thread in clients:
            thread.start()
        drive(stack, schedule(args.operations, counts), clients, work)
        soak_s = _since(began)
        ended = time.monotonic()
        progress(f"clients done after {soak_s} s; releasing everything and settling")
        final, settling = settle(stack, {op.lease for op in work.done if op.lease})
        if final is not None:
            leases.relisted(final.leases)
            instances.relisted(final.instances)
    finally:
        stopping.set()
        for watch in watches:
            watch.stop()
    return {
        "arguments": {**vars(args), "keep_logs": str(args.keep_logs) if args.keep_logs else None},
        "soak_s": soak_s,
        **outcome(work.done, tally=tally, leases=leases, instances=instances, final=final,
                   end=ended),
        "kubectl_retries_while_kube_apiserver_restarted": sum(t.kubectl_retries for t in tenants),
        "end": settling,
        "chaos": {"planned": counts, "events": stack.events, "exits_on_their_own": stack.own_exits,
                  "watch_lists": {w.name: w.lists for w in watches}},
    }  # fmt: skip


def outcome(
    operations: list[Operation],
    *,
    tally: Tally,
    leases: LeaseLedger,
    instances: InstanceLedger,
    final: Snapshot | None,
    end: float,
) -> Json:
    """Counts of every failure the module docstring names."""
    overlapping = list(leases.overlaps.values())
    several, claimed = leases.several(), instances.several()
    by_clients = client_overlaps(operations, end)
    involved = {str(f["instance"]) for f in (*overlapping, *several, *claimed)}
    involved |= {str(f["namespace"]).removeprefix("lessor-ns-") for f in by_clients}
    lost = [op.lease for op in operations if op.not_found and not op.found_after_not_found]
    never = [op.lease for op in operations if op.stuck]
    unended = final.unended() if final is not None else None
    http = tally.report()
    leaks = final.leaks() if final is not None else None
    latencies = [op.bound - op.posted for op in operations if op.bound is not None]
    return {
        "operations": {
            "finished": len(operations),
            "completed": sum(1 for op in operations if not op.failures),
            "bound": len(latencies),
            "outcomes": dict(Counter(op.outcome for op in operations)),
            "creates_after_an_uncertain_retry": sum(op.create_uncertain for op in operations),
        },
        "double_binds": {
            "count": len(involved),
            "bound_at_once_in_watch_order": overlapping,
            "instance_named_by_several_leases": several,
            "instance_claimed_by_several_leases": claimed,
            "namespace_held_by_two_clients_at_once": by_clients,
        },
        "leaked_instances": leaks,
        "lost_leases": {"count": len(lost), "leases": lost,
                        "transient_404s": sum(op.found_after_not_found for op in operations)},
        "stuck_leases": {
            "never_bound_within_120s": {"count": len(never), "leases": never},
            "not_ended_after_settling": unended,
        },
        "http_5xx": http,
        "lease_latency_ms": percentiles(latencies, 1000, 1),
        "goal": {
            "no_double_binds": not involved,
            "no_leaked_instances": leaks is not None and not (
                leaks["beyond_warm_target"] or leaks["namespaces_without_instance"]
                or leaks["ready_instances_without_namespace"]),
            "no_lost_leases": not lost,
            "no_stuck_leases": not never and unended == [],
            "no_5xx_but_503_with_retry_after": not http["other_than_503_with_retry_after"],
        },
    }  # fmt: skip


def run(args: argparse.Namespace) -> Json:
    binaries = ensure_binaries(progress)
    with tempfile.TemporaryDirectory(prefix="lessor-chaos-") as directory:
        work = Path(directory).resolve()
        watch_over(work, remove=True)  # a run killed mid-way leaves nothing running
        stack = ChaosStack(work, binaries)
        try:
            stack.start()
            result = soak(stack, args)
        finally:
            stack.stop(args.keep_logs)
        leftovers = leftover_processes(work)
    result["leaked_processes"] = leftovers
    result["goal"]["no_leaked_processes"] = not leftovers
    result["error_lines_in_logs"] = stack.findings
    return result


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.chaos",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--operations", type=int, default=500)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--operator-kills", type=int, default=50)
    parser.add_argument("--api-kills", type=int, default=10, help="of each API server")
    parser.add_argument("--kube-restarts", type=int, default=3)
    parser.add_argument("--keep-logs", type=Path, help="copy every process's log here")
    args = parser.parse_args()
    began = time.monotonic()
    try:
        result = {"date": datetime.date.today().isoformat(), **run(args)}
    except KeyboardInterrupt:
        progress("interrupted: everything the run started is stopped; no report")
        return 130
    result["duration_s"] = _since(began)
    text = json.dumps(result, indent=2)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{result['date']}-chaos.json").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
