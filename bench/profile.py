"""Where the time of a lease goes: py-spy on the API server's workers and on the operator while
clients lease clusters from a warm pool (rounds of leases at once, as bench.lease_latency), and
kube-apiserver's own request counters for the round trips each lease costs.

Writes to bench/results/ (or `--out`):
- `profile-<date>-apiserver.svg`, `profile-<date>-operator.svg`: flame graphs (CPU samples;
  waiting on a socket is not CPU and not in them);
- `profile-<date>.json`: the CPU samples of each process grouped by what they were doing (the
  innermost frame that names a known layer decides), and the kube-apiserver requests per lease
  by verb and resource.

py-spy (from PyPI, `pip install lessor[bench]`) attaches with ptrace: run as root or with
`kernel.yama.ptrace_scope` 0. The load runs twice on the same stack, once recorded as collapsed
stacks (the breakdown) and once as a flame graph, because py-spy writes one format per run.

With `--load create` the load is POST /v1/leases alone (`--clients` threads, OIDC, into a pool
with no warm cluster, as bench.api_throughput's POST row); with `--load get` (OIDC) or
`--load ssh-get` (SSH signatures) it is GET /v1/leases/:id of one lease, as its get_lease row.
With `--load lease-alone` it is the rounds of `lease` from a pool whose `maxInstances` is its
warm target, each round started from a whole pool (bench.lease_latency's
`clients_without_replacements`): the requests and CPU are counted from a round's first POST to
its last Bound, so they are what leasing costs without the release, the teardown and the
replacement (the flame graphs still hold those). The files are then named
`profile-<date>-<load>*`.

Before the recorded runs, one unrecorded run of the same load measures what py-spy would
distort: its latencies, kube-apiserver's requests per operation, and the CPU each process of the
stack spent per operation (from /proc: kube-apiserver, etcd, the API server's workers, the
operator, the benchmark's own clients) beside the machine's capacity over the run.

Usage: python -m bench.profile [--clients 10] [--seconds 20]
    [--load lease|lease-alone|create|get|ssh-get]
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import time
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import api_throughput, lease_latency
from bench.stack import Stack, local_stack, percentiles, progress
from lessor.controlplane.processes import processes_mentioning

RESULTS = Path(__file__).resolve().parent / "results"
READS = {"get": "oidc", "ssh-get": "ssh"}  # a read load and the credential it is made with

# (pattern in a frame's file, layer): the innermost frame matching one decides a sample's layer.
LAYERS = (
    (r"(^|/)(ssl|socket|selectors)\.py|gevent/_ssl|gevent/_socket", "socket and TLS"),
    (
        r"(^|/)(urllib3|httpx|httpcore|h11|anyio|aiohttp|multidict|yarl)/|(^|/)http/client\.py",
        "HTTP client",
    ),
    (r"(^|/)kubernetes/client/", "kubernetes client (models, serialization)"),
    (r"(^|/)kr8s/", "kr8s"),
    (r"(^|/)json/|orjson", "JSON"),
    (r"(^|/)pydantic(_core)?/", "pydantic validation"),
    (r"(^|/)(jwt|cryptography)/|lessor/apiserver/auth/", "authentication"),
    (r"lessor/apiserver/policy/", "AccessPolicy"),
    (r"lessor/apiserver/leases/reservations", "slot reservations"),
    (r"lessor/apiserver/", "lessor API server"),
    (r"lessor/operator/runtime/", "operator runtime (queues, informers)"),
    (r"lessor/operator/", "operator reconcilers"),
    (r"lessor/", "lessor, other"),
    (r"(^|/)(falcon|gunicorn)/", "falcon and gunicorn"),
    (r"(^|/)gevent/", "gevent"),
    (r"(^|/)asyncio/", "asyncio"),
    (r"(^|/)prometheus_client/", "metrics"),
    (r"(^|/)logging/", "logging"),
)
_LAYER_PATTERNS = tuple((re.compile(pattern), layer) for pattern, layer in LAYERS)
_FRAME_FILE = re.compile(r"\(([^()]*?)(?::\d+)?\)$")


def layer_of(stack: list[str]) -> str:
    for frame in reversed(stack):
        found = _FRAME_FILE.search(frame)
        filename = found.group(1) if found else frame
        for pattern, layer in _LAYER_PATTERNS:
            if pattern.search(filename):
                return layer
    return "other (interpreter, imports, stdlib)"


def breakdown(collapsed: Path) -> dict[str, Any]:
    """Samples per layer, as a share of all samples, from py-spy's collapsed stacks."""
    layers: Counter[str] = Counter()
    for line in collapsed.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            layers[layer_of(stack.split(";"))] += int(count)
    total = sum(layers.values())
    return {
        "samples": total,
        "share_percent": {
            layer: round(100 * count / total, 1) for layer, count in layers.most_common()
        }
        if total
        else {},
    }


Window = Callable[[], None]


def load(
    stack: Stack,
    mode: str,
    clients: int,
    seconds: float,
    window: tuple[Window, Window] | None = None,
) -> list[float]:
    """For `seconds`: the load of bench.lease_latency (`lease`, `lease-alone`), or POSTs alone
    (`create`), or GETs; the latency of each operation in seconds. `window`: called when a
    round of `lease-alone` starts and when its last lease is Bound (the counted part)."""
    until = time.monotonic() + seconds
    if mode == "lease":
        return lease_latency.concurrent(stack, "profile", clients, sys.maxsize, until=until)
    if mode == "lease-alone":
        return lease_latency.concurrent(
            stack, "alone", clients, sys.maxsize, until=until, whole=clients * 3, window=window
        )
    latencies: list[float] = []
    target = _read_target(stack) if mode in READS else ""

    def calling(client: Any) -> Callable[[], int]:
        def call() -> int:
            started = time.perf_counter()
            if target:
                status = client.call("GET", f"/v1/leases/{target}")[0]
            else:
                status = client.call("POST", "/v1/leases", {"profile": "profile"})[0]
            latencies.append(time.perf_counter() - started)
            return int(status)

        return call

    # One keep-alive client per thread, as api_throughput's rows.
    credential = READS.get(mode, "oidc")
    api_throughput.load([calling(getattr(stack, credential)()) for _ in range(clients)], seconds)
    return latencies


_targets: dict[int, str] = {}


def _read_target(stack: Stack) -> str:
    """The one lease that the read loads GET, made once per stack (it waits in the queue of a
    pool with no warm cluster, as api_throughput's)."""
    if id(stack) not in _targets:
        _, lease = stack.static().call("POST", "/v1/leases", {"profile": "profile"})
        _targets[id(stack)] = lease["id"]
    return _targets[id(stack)]


def _role(argv: list[str]) -> str:
    for module in ("lessor.operator", "lessor.apiserver"):
        if module in argv:
            return module
    return Path(argv[0]).name if argv else "?"


def cpu_seconds(stack: Stack) -> dict[str, float]:
    """CPU (user and system) each process of the stack has used so far, summed by role: the
    control plane's binaries by name, lessor's processes by module (the API server's gunicorn
    master and workers together), this benchmark's own process as `clients`."""
    tick = os.sysconf("SC_CLK_TCK")
    used: defaultdict[str, float] = defaultdict(float)
    for pid in processes_mentioning(str(stack.work)):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        used[_role(argv)] += (int(fields[11]) + int(fields[12])) / tick
    own = os.times()
    used["clients (this benchmark)"] += own.user + own.system
    return used


class Meter:
    """kube-apiserver's requests, each process's CPU and the wall time, summed over windows."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.requests: Counter[str] = Counter()
        self.cpu: dict[str, float] = {}
        self.elapsed = 0.0
        self._start: tuple[Counter[str], dict[str, float], float] | None = None

    def begin(self) -> None:
        self._start = (kube_requests(self.stack), cpu_seconds(self.stack), time.monotonic())

    def end(self, settle: float = 0.0) -> None:
        """`settle`: seconds to wait before counting, for the work a window's operations left
        behind (Events, the instance's and the pool's status), whose requests and CPU are
        counted and whose wall time is not: a round keeps the cores busy, the wait would not."""
        assert self._start is not None
        requests, cpu, started = self._start
        self.elapsed += time.monotonic() - started
        time.sleep(settle)
        self.requests.update(kube_requests(self.stack) - requests)
        for role, used in cpu_seconds(self.stack).items():
            self.cpu[role] = self.cpu.get(role, 0.0) + used - cpu.get(role, 0.0)


def measured(stack: Stack, mode: str, clients: int, seconds: float) -> dict[str, Any]:
    """One unrecorded run: latencies, kube-apiserver requests and CPU per operation (for
    `lease-alone`, within the rounds' windows)."""
    meter = Meter(stack)
    if mode == "lease-alone":
        window = (meter.begin, functools.partial(meter.end, settle=1.0))
        samples = load(stack, mode, clients, seconds, window=window)
    else:
        meter.begin()
        samples = load(stack, mode, clients, seconds)
        meter.end()
    elapsed, cpu = meter.elapsed, meter.cpu
    count = max(1, len(samples))
    per_operation = {key: round(meter.requests[key] / count, 2) for key in sorted(meter.requests)}
    return {
        "operations": len(samples),
        "per_second": round(len(samples) / elapsed, 1),
        "latency_ms": percentiles(samples, 1000, 1),
        "kube_requests_per_operation": per_operation,
        "kube_requests_per_operation_total": round(sum(per_operation.values()), 1),
        "cpu_ms_per_operation": {
            role: round(1000 * used / count, 2)
            for role, used in sorted(cpu.items(), key=lambda item: -item[1])
        },
        "cores_busy": round(sum(cpu.values()) / elapsed, 2),
        "cores": os.cpu_count(),
    }


def kube_requests(stack: Stack) -> Counter[str]:
    """kube-apiserver's apiserver_request_total, summed by verb and resource (and subresource)."""
    pki = stack.cluster.pki
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    url = f"{stack.cluster.server}/metrics"  # https, the cluster's own
    with urllib.request.urlopen(url, context=context) as answer:  # noqa: S310
        text = answer.read().decode()
    counts: Counter[str] = Counter()
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
        if labels.get("verb") == "WATCH" or labels.get("namespace") == "kube-system":
            continue
        resource = labels.get("resource", "")
        if labels.get("subresource"):
            resource += "/" + labels["subresource"]
        counts[f"{labels.get('verb')} {resource}"] += int(float(line.rpartition(" ")[2]))
    return counts


def record(pid: int, seconds: float, output: Path, fmt: str) -> subprocess.Popen[bytes]:
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    return subprocess.Popen(
        [py_spy, "record", "--pid", str(pid), "--subprocesses", "--rate", "250", "--nonblocking",
         "--duration", str(int(seconds)), "--format", fmt, "--output", str(output)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip


def profiled_load(
    stack: Stack, mode: str, clients: int, seconds: float, *, outputs: dict[str, Path], fmt: str
) -> list[float]:
    operator, apiserver = stack.processes
    recorders = [
        record(apiserver.pid, seconds, outputs["apiserver"], fmt),
        record(operator.pid, seconds, outputs["operator"], fmt),
    ]
    time.sleep(1)  # py-spy attached
    samples = load(stack, mode, clients, seconds - 4)
    for recorder in recorders:
        _, errors = recorder.communicate(timeout=120)
        if recorder.returncode:
            raise RuntimeError(f"py-spy failed: {errors.decode()[-500:]}")
    return samples


def run(
    clients: int = 10, seconds: float = 20, out: Path = RESULTS, mode: str = "lease"
) -> dict[str, Any]:
    name = datetime.date.today().isoformat() + ("" if mode == "lease" else f"-{mode}")
    with local_stack(with_node=True, operator_args=("--test-backends",)) as stack:
        warm = clients * 3 if mode.startswith("lease") else 0
        if mode == "lease-alone":
            stack.pool("alone", warm, backend="namespace", max_instances=warm)
            stack.wait_ready("alone", warm)
        else:
            stack.pool("profile", warm, backend="namespace")
            stack.wait_ready("profile", warm)
        progress("warming up (the first requests load JWKS, caches, connections)")
        load(stack, mode, clients, 5)
        progress(f"{clients} clients, {mode}, {seconds:.0f} s, measured without py-spy")
        unrecorded = measured(stack, mode, clients, seconds)
        progress("the same, recorded as collapsed stacks")
        raw = {part: stack.work / f"{part}.txt" for part in ("apiserver", "operator")}
        samples = profiled_load(stack, mode, clients, seconds, outputs=raw, fmt="raw")
        progress("the same again, recorded as flame graphs")
        svg = {part: out / f"profile-{name}-{part}.svg" for part in ("apiserver", "operator")}
        profiled_load(stack, mode, clients, seconds, outputs=svg, fmt="flamegraph")
        result = {
            "load": mode,
            "clients": clients,
            "seconds": seconds,
            "measured": unrecorded,
            "recorded_latency_ms": percentiles(samples, 1000, 1),
            "cpu": {part: breakdown(path) for part, path in raw.items()},
            "flame_graphs": [str(path.relative_to(out.parent)) for path in svg.values()],
        }
    (out / f"profile-{name}.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--out", type=Path, default=RESULTS)
    loads = ("lease", "lease-alone", "create", *READS)
    parser.add_argument("--load", choices=loads, default="lease")
    arguments = parser.parse_args()
    result = run(arguments.clients, arguments.seconds, arguments.out, arguments.load)
    print(json.dumps(result, indent=1))
    sys.exit(0)
