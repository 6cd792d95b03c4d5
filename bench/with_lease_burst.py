"""A burst of CI jobs, each `lessor with-lease POOL -- CMD`, against a small pool and an API
server with a concurrency ceiling (issue 43, item 2): do they all succeed, does none spend
more than its retry budget waiting out refusals, and is no lease left behind?

The stack is bench.stack's (a local control plane with a kwok node, the operator with
`--test-backends`, the API server under gunicorn). One ClusterPool of the test-only `namespace`
backend (an instance is a namespace with an admin ServiceAccount: its kubeconfig is real, the
host's kube-apiserver with that ServiceAccount's token, the namespace as context), warmTarget
and maxInstances both `--pool`: at most that many clusters exist, so the jobs beyond them wait
(Pending, in the pool's queue) until a released cluster is torn down and a new one made.

The API server runs with `--max-in-flight` lowered (default 4 a worker, 2 workers) so that the
burst meets load shedding (429 `overloaded` with Retry-After: 1), and with the server's default
per-principal lease admission rate (5 a second, burst 30: 429 `rate_limited` with Retry-After),
where the other benchmarks lift it. Every job authenticates as the stack's one identity (its
static token), as the jobs of one CI project would: the identity's maxConcurrentLeases is the
stack's (100000), so the concurrency 429, which carries no Retry-After and is final, never
answers; the per-identity limits (admission rate, `--max-waits-per-identity` 8 long polls at
once) are shared by all jobs, the hard case.

`--jobs` processes are started at once, each the installed `lessor` with its own HOME and
XDG_CONFIG_HOME, LESSOR_ENDPOINT and LESSOR_TOKEN: `lessor with-lease POOL --ttl 5m -- sh -c
'...'`, whose command prints the moment it starts (the lease is then Bound, its kubeconfig
written), reads its namespace's ServiceAccount with kubectl through KUBECONFIG, and holds the
cluster `--hold` seconds. Per job: exit status, wall time, time to Bound (process start until
the command starts), the Retry-After waits it printed (`the server answered 429 (...); retrying
in 1s`) and their sum, the queue positions it was told, whether it said it released the lease.
From the API server's /metrics (a metrics listener of its own): 429s and 503s answered, shed
requests, admission refusals, long polls answered at once. From kube-apiserver directly: the
pool's counts every half second (how fast released clusters come back), and every ClusterLease
once the jobs have ended; a lease neither Released nor Recycling (nor Expired, which a 5 m TTL
cannot reach here) is a leak.

Exits 1 if a job failed, a job waited out refusals longer than its budget, or a lease leaked:
the benchmark is a check too. Writes bench/results/<date>-with-lease-burst.json.

Usage: python -m bench.with_lease_burst [--jobs 50] [--pool 10] [--hold 2.5]
       [--max-in-flight 4] [--workers 2] [--no-write]
"""

from __future__ import annotations

import argparse
import datetime
import http.client
import json
import os
import re
import shlex
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench.stack import NAMESPACE, TOKEN, Stack, local_stack, metrics, percentiles, progress
from lessor.apiserver.routes.settings import Settings
from lessor.cli.limits import RETRY_BUDGET_SECONDS
from lessor.controlplane.binaries import ensure_binaries
from lessor.controlplane.ports import PortReservation

RESULTS = Path(__file__).resolve().parent / "results"
LESSOR = Path(sys.executable).parent / "lessor"
POOL = "burst"
# What lessor.cli.client prints before waiting out a refusal, and before retrying a read that
# got no answer.
RETRY_LINE = re.compile(r"the server answered (\d{3}) \((.*)\); retrying in ([0-9.]+)s")
UNREACHABLE_LINE = re.compile(r"trying again in ([0-9.]+)s")
QUEUE_LINE = re.compile(r"queue position (\d+)")
ENDED = ("Released", "Recycling")  # what a lease is once released (Recycling: torn down now)


@dataclass
class Job:
    index: int
    directory: Path
    started: float = 0.0  # time.time(), just before the process was started
    ended: float = 0.0
    status: int | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def result(self) -> dict[str, Any]:
        out = (self.directory / "stdout").read_text(errors="replace")
        err = (self.directory / "stderr").read_text(errors="replace")
        bound = re.search(r"^bound-at ([0-9.]+)$", out, re.MULTILINE)
        lease = re.search(r"^lease (\S+)$", out, re.MULTILINE)
        retries = [
            (int(m.group(1)), m.group(2), float(m.group(3))) for m in RETRY_LINE.finditer(err)
        ]
        queue = [int(m.group(1)) for m in QUEUE_LINE.finditer(err)]
        return {
            "job": self.index,
            "started": self.started,
            "exit": self.status,
            "wall_s": round(self.ended - self.started, 3),
            "to_bound_s": round(float(bound.group(1)) - self.started, 3) if bound else None,
            "lease": lease.group(1) if lease else None,
            "ran_kubectl": "serviceaccount/tenant" in out,
            "released": "lessor: released lease" in err,
            "retry_waits": len(retries),
            "retry_wait_s": round(sum(wait for _, _, wait in retries), 1),
            "retries_by_status": dict(Counter(str(status) for status, _, _ in retries)),
            "retries_by_detail": dict(Counter(detail for _, detail, _ in retries)),
            "unreachable_retries": len(UNREACHABLE_LINE.findall(err)),
            "first_queue_position": queue[0] if queue else None,
            "stderr_tail": err.strip().splitlines()[-3:],
        }


class Kube:
    """GETs straight on kube-apiserver with the admin certificate: what the bench reads about
    the pool and its leases is not sent through the API server it measures (nor refused by it)."""

    def __init__(self, stack: Stack) -> None:
        pki = stack.cluster.pki
        self.context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        self.context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        parts = urlsplit(stack.cluster.server)
        self.host, self.port = parts.hostname or "", parts.port
        self.base = f"/apis/lessor.dev/v1alpha1/namespaces/{NAMESPACE}"

    def get(self, path: str) -> Any:
        connection = http.client.HTTPSConnection(
            self.host, self.port, context=self.context, timeout=30
        )
        try:
            connection.request("GET", self.base + path)
            answer = connection.getresponse()
            raw = answer.read()
        finally:
            connection.close()
        if answer.status != 200:
            raise RuntimeError(f"GET {path}: {answer.status}")
        return json.loads(raw)

    def pool(self) -> dict[str, Any]:
        found: dict[str, Any] = self.get(f"/clusterpools/{POOL}").get("status", {})
        return found

    def leases(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.get("/clusterleases")["items"]
        return items


def watch_pool(kube: Kube, began: float, done: threading.Event) -> list[dict[str, Any]]:
    """The pool's counts every half second until `done`, each with its moment (s from `began`)."""
    samples: list[dict[str, Any]] = []

    def sample() -> None:
        while not done.wait(0.5):
            try:
                status = kube.pool()
            except (OSError, RuntimeError, http.client.HTTPException):
                continue
            samples.append(
                {"t": round(time.time() - began, 2)}
                | {k: status.get(k, 0) for k in ("ready", "leased", "creating", "recycling")}
                | {"queue": status.get("queueDepth", 0)}
            )

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    done.wait()
    thread.join()
    return samples


def server_counts(port: int) -> dict[str, Any]:
    """The API server's refusals so far: answers by status (429, 503) and route, load shedding,
    admission refusals, long polls answered at once."""
    samples = metrics(port)
    by_status: Counter[str] = Counter()
    by_route: Counter[str] = Counter()
    declined: Counter[str] = Counter()
    for name, value in samples.items():
        if name.startswith("lessor_http_requests_total{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', name))
            by_status[labels["status"]] += int(value)
            if labels["status"] in ("429", "503"):
                by_route[f"{labels['status']} {labels['method']} {labels['route']}"] += int(value)
        elif name.startswith("lessor_waits_declined_total{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', name))
            declined[labels["bound"]] += int(value)
    return {
        "answers_by_status": dict(by_status),
        "refusals_by_route": dict(by_route),
        "shed": int(samples.get("lessor_http_shed_total", 0)),
        "admission_rate_limited": int(samples.get("lessor_lease_admission_rate_limited_total", 0)),
        "long_polls_answered_at_once": dict(declined),
    }


def difference(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in after.items():
        if isinstance(value, dict):
            result[key] = {
                k: v - before.get(key, {}).get(k, 0)
                for k, v in value.items()
                if v - before.get(key, {}).get(k, 0)
            }
        else:
            result[key] = value - before.get(key, 0)
    return result


def refill(samples: list[dict[str, Any]], pool: int) -> dict[str, Any]:
    """How the pool's capacity came back while the jobs held and released it: the longest
    stretch with a queue and fewer than `pool` clusters leased (clusters being torn down or
    made while leases waited), and the time it was so in all."""
    longest, total, since, previous = 0.0, 0.0, None, None
    for sample in samples:
        short = sample["queue"] > 0 and sample["leased"] < pool
        if short and since is None:
            since = sample["t"]
        if not short and since is not None:
            longest = max(longest, sample["t"] - since)
            since = None
        if short and previous is not None:
            total += sample["t"] - previous["t"]
        previous = sample
    return {
        "longest_short_stretch_s": round(longest, 1),
        "short_s": round(total, 1),
        "max_recycling": max((s["recycling"] for s in samples), default=0),
        "max_creating": max((s["creating"] for s in samples), default=0),
    }


def compiled(home: Path, command: list[str]) -> dict[str, str]:
    """The environment of a CLI whose modules are compiled already, as an installed package's
    are (pip writes their bytecode): a cache of its own under `home`, filled by one run of the
    command (which stops at its first request, to a closed port). Without it, where
    PYTHONDONTWRITEBYTECODE is set (as on this project's machines), every job would compile
    every module it imports, about half of its start-up."""
    env = {**os.environ, "PYTHONPYCACHEPREFIX": str(home / "pycache")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run(
        [*command, "with-lease", POOL, "--endpoint", "http://127.0.0.1:9", "--", "true"],
        env={**env, "HOME": str(home), "XDG_CONFIG_HOME": str(home / "config")},
        capture_output=True,
        check=False,
    )
    return env


def launch(jobs: list[Job], argv: list[str], base: str, environment: dict[str, str]) -> None:
    """Start every job at once (each with its own home and CLI configuration) and wait until
    they have all ended."""

    def wait_for(job: Job) -> None:
        assert job.process is not None
        job.status = job.process.wait()
        job.ended = time.time()

    waiters = []
    for job in jobs:
        env = {
            **environment,
            "HOME": str(job.directory),
            "XDG_CONFIG_HOME": str(job.directory / "config"),
            "LESSOR_ENDPOINT": base,
            "LESSOR_TOKEN": TOKEN,
        }
        env.pop("KUBECONFIG", None)
        job.started = time.time()
        job.process = subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=(job.directory / "stdout").open("wb"),
            stderr=(job.directory / "stderr").open("wb"),
        )
        waiter = threading.Thread(target=wait_for, args=(job,))
        waiter.start()
        waiters.append(waiter)
    for waiter in waiters:
        waiter.join(timeout=900)


def settle(kube: Kube, pool: int) -> tuple[list[dict[str, Any]], float | None]:
    """Every ClusterLease once released leases had a minute to turn from Recycling to Released
    (their namespace gone), and how long after the call the pool was back to `pool` warm
    clusters (None: not within two minutes)."""
    began = time.monotonic()
    deadline = began + 60
    while True:
        leases = kube.leases()
        phases = {lease.get("status", {}).get("phase") for lease in leases}
        if phases <= {"Released"} or time.monotonic() > deadline:
            break
        time.sleep(1)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        status = kube.pool()
        if status.get("ready", 0) >= pool and not status.get("leased"):
            return leases, round(time.monotonic() - began, 1)
        time.sleep(0.5)
    return leases, None


def server_times(per_job: list[dict[str, Any]], leases: list[dict[str, Any]]) -> None:
    """Add to each job, from its lease (timestamps in whole seconds, so +-1 s): when its lease
    was created, Bound and ended, in seconds from the job's start."""
    by_name = {lease["metadata"]["name"]: lease for lease in leases}
    for job in per_job:
        lease = by_name.get(job["lease"] or "")
        if lease is None:
            continue
        status = lease.get("status", {})
        stamps = {
            "created": lease["metadata"]["creationTimestamp"],
            "bound": status.get("boundAt"),
            "ended": status.get("endedAt"),
        }
        for what, stamp in stamps.items():
            if stamp:
                job[f"lease_{what}_s"] = round(_seconds(stamp) - job["started"], 1)


def summarize(per_job: list[dict[str, Any]], leases: list[dict[str, Any]]) -> dict[str, Any]:
    server_times(per_job, leases)
    phases = Counter(lease.get("status", {}).get("phase") or "none" for lease in leases)
    leaked = [
        lease["metadata"]["name"]
        for lease in leases
        if lease.get("status", {}).get("phase") not in ENDED
    ]
    known = {job["lease"] for job in per_job if job["lease"]}
    bound_server = [
        _seconds(lease["status"]["boundAt"]) - _seconds(lease["metadata"]["creationTimestamp"])
        for lease in leases
        if lease.get("status", {}).get("boundAt")
    ]
    failed = [j for j in per_job if j["exit"] != 0 or not j["ran_kubectl"] or not j["released"]]
    over_budget = [j["job"] for j in per_job if j["retry_wait_s"] > RETRY_BUDGET_SECONDS]
    to_bound = [j["to_bound_s"] for j in per_job if j["to_bound_s"] is not None]
    details: Counter[str] = Counter()
    for job in per_job:
        details.update(job["retries_by_detail"])
    return {
        "succeeded": len(per_job) - len(failed),
        "failed": [{k: j[k] for k in ("job", "exit", "stderr_tail")} for j in failed],
        "job_s": percentiles([j["wall_s"] for j in per_job], 1, 2),
        "to_bound_s": percentiles(to_bound, 1, 2),
        "server_bound_after_create_s": percentiles(bound_server, 1, 2),
        # Process start until its POST was served: the CLI's start-up in the burst.
        "lease_created_after_start_s": percentiles(
            [j["lease_created_s"] for j in per_job if "lease_created_s" in j], 1, 1
        ),
        # Bound (the lease's boundAt) until the job's command started: the client's notice.
        "command_after_bound_s": percentiles(
            [
                j["to_bound_s"] - j["lease_bound_s"]
                for j in per_job
                if j["to_bound_s"] is not None and "lease_bound_s" in j
            ],
            1,
            1,
        ),
        "retry_waits": sum(j["retry_waits"] for j in per_job),
        "jobs_that_waited": sum(1 for j in per_job if j["retry_waits"]),
        "retry_wait_s": percentiles([j["retry_wait_s"] for j in per_job], 1, 1),
        "retry_waits_by_detail": dict(details),
        "over_budget": over_budget,
        "unreachable_retries": sum(j["unreachable_retries"] for j in per_job),
        "first_queue_position": percentiles(
            [j["first_queue_position"] for j in per_job if j["first_queue_position"]], 1, 0
        ),
        "leases": len(leases),
        "leases_no_job_knew": sorted({lease["metadata"]["name"] for lease in leases} - known),
        "lease_phases": dict(phases),
        "leaked": leaked,
        "ok": not failed and not over_budget and not leaked,
    }


def run(
    jobs: int = 50,
    pool: int = 10,
    hold: float = 2.5,
    max_in_flight: int = 4,
    workers: int = 2,
) -> dict[str, Any]:
    binaries = ensure_binaries(progress)
    kubectl, shell = binaries / "kubectl", shutil.which("sh") or "/bin/sh"
    command = [str(LESSOR)] if LESSOR.exists() else [sys.executable, "-m", "lessor.cli.main"]
    script = (
        'echo "bound-at $(date +%s.%N)"; echo "lease $LESSOR_LEASE_ID"; '
        f"{shlex.quote(str(kubectl))} get serviceaccount tenant -o name && sleep {hold}"
    )
    argv = [*command, "with-lease", POOL, "--ttl", "5m", "--", shell, "-c", script]
    reservation = PortReservation()
    metrics_port = reservation.take()
    defaults = Settings()
    api_args = (
        f"--max-in-flight={max_in_flight}",
        f"--lease-admission-rate={defaults.lease_admission_rate:g}",
        f"--lease-admission-burst={defaults.lease_admission_burst}",
        f"--metrics-bind=127.0.0.1:{metrics_port}",
    )
    result: dict[str, Any] = {
        "date": datetime.date.today().isoformat(),
        "cpus": os.cpu_count(),
        "jobs": jobs,
        "pool": pool,
        "hold_s": hold,
        "backend": "namespace",
        "api_workers": workers,
        "max_in_flight": max_in_flight,
        "lease_admission": [defaults.lease_admission_rate, defaults.lease_admission_burst],
        "max_waits_per_identity": defaults.max_waits_per_identity,
        "retry_budget_s": RETRY_BUDGET_SECONDS,
        "identities": 1,
        "cli_bytecode_cached": True,
    }
    with (
        tempfile.TemporaryDirectory(prefix="lessor-with-lease-") as home,
        local_stack(
            with_node=True,
            operator_args=("--test-backends",),
            api_workers=workers,
            api_args=api_args,
        ) as stack,
    ):
        reservation.release()
        environment = compiled(Path(home), command)
        stack.apply({
            "apiVersion": "lessor.dev/v1alpha1", "kind": "ClusterPool",
            "metadata": {"name": POOL},
            "spec": {"warmTarget": pool, "maxInstances": pool, "ttl": "30m",
                     "backend": {"type": "namespace"}},
        })  # fmt: skip
        progress(f"waiting for {pool} warm namespace instances")
        stack.wait_ready(POOL, pool)
        kube = Kube(stack)
        before = server_counts(metrics_port)
        everyone = []
        for index in range(jobs):
            directory = Path(home) / f"job-{index}"
            (directory / "config").mkdir(parents=True)
            everyone.append(Job(index, directory))
        done = threading.Event()
        began = time.time()
        timeline: list[dict[str, Any]] = []
        watcher = threading.Thread(
            target=lambda: timeline.extend(watch_pool(kube, began, done)), daemon=True
        )
        watcher.start()
        progress(f"starting {jobs} `lessor with-lease {POOL}` jobs at once")
        launch(everyone, argv, stack.base, environment)
        result["all_ended_s"] = round(time.time() - began, 1)
        progress(f"all jobs ended after {result['all_ended_s']}s; checking the leases")
        result["server"] = difference(server_counts(metrics_port), before)
        leases, refilled = settle(kube, pool)
        done.set()
        watcher.join()
        per_job = [job.result() for job in everyone]
    result.update(summarize(per_job, leases))
    result["pool_back_to_warm_after_last_job_s"] = refilled
    result["refill"] = refill(timeline, pool)
    result["pool_timeline"] = timeline
    result["per_job"] = per_job
    return result


def _seconds(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.with_lease_burst",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--pool", type=int, default=10)
    parser.add_argument(
        "--hold", type=float, default=2.5, help="seconds each job holds its cluster"
    )
    parser.add_argument("--max-in-flight", type=int, default=4, help="per API worker")
    parser.add_argument("--workers", type=int, default=2, help="API server workers")
    parser.add_argument("--no-write", action="store_true", help="print only (a dry run)")
    args = parser.parse_args()
    result = run(args.jobs, args.pool, args.hold, args.max_in_flight, args.workers)
    text = json.dumps(result, indent=1)
    if not args.no_write:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / f"{result['date']}-with-lease-burst.json").write_text(text + "\n")
    summary = {k: v for k, v in result.items() if k not in ("pool_timeline", "per_job")}
    print(json.dumps(summary, indent=1))
    if not result["ok"]:
        progress("FAILED: a job failed, waited past its retry budget, or a lease leaked")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
