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

Usage: python -m bench.profile [--clients 10] [--seconds 20]
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import shutil
import ssl
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

from bench import lease_latency
from bench.stack import Stack, local_stack, percentiles, progress

RESULTS = Path(__file__).resolve().parent / "results"

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


def load(stack: Stack, pool: str, clients: int, seconds: float) -> list[float]:
    """The load of bench.lease_latency for `seconds`."""
    return lease_latency.concurrent(stack, pool, clients, sys.maxsize, time.monotonic() + seconds)


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
    stack: Stack, clients: int, seconds: float, outputs: dict[str, Path], fmt: str
) -> list[float]:
    operator, apiserver = stack.processes
    recorders = [
        record(apiserver.pid, seconds, outputs["apiserver"], fmt),
        record(operator.pid, seconds, outputs["operator"], fmt),
    ]
    time.sleep(1)  # py-spy attached
    samples = load(stack, "profile", clients, seconds - 4)
    for recorder in recorders:
        _, errors = recorder.communicate(timeout=120)
        if recorder.returncode:
            raise RuntimeError(f"py-spy failed: {errors.decode()[-500:]}")
    return samples


def run(clients: int = 10, seconds: float = 20, out: Path = RESULTS) -> dict[str, Any]:
    date = datetime.date.today().isoformat()
    with local_stack(with_node=True, operator_args=("--test-backends",)) as stack:
        stack.pool("profile", clients * 3, backend="namespace")
        stack.wait_ready("profile", clients * 3)
        progress("warming up (the first requests load JWKS, caches, connections)")
        load(stack, "profile", clients, 5)
        progress(f"{clients} clients leasing for {seconds:.0f} s, recorded as collapsed stacks")
        before = kube_requests(stack)
        raw = {name: stack.work / f"{name}.txt" for name in ("apiserver", "operator")}
        samples = profiled_load(stack, clients, seconds, raw, "raw")
        after = kube_requests(stack)
        progress("the same again, recorded as flame graphs")
        svg = {name: out / f"profile-{date}-{name}.svg" for name in ("apiserver", "operator")}
        profiled_load(stack, clients, seconds, svg, "flamegraph")
        leases = len(samples)
        per_lease = {
            key: round((after[key] - before[key]) / leases, 2)
            for key in sorted(after)
            if after[key] > before[key]
        }
        result = {
            "clients": clients,
            "seconds": seconds,
            "leases": leases,
            "lease_ms": percentiles(samples, 1000, 1),
            "kube_requests_per_lease": per_lease,
            "kube_requests_per_lease_total": round(sum(per_lease.values()), 1),
            "cpu": {name: breakdown(path) for name, path in raw.items()},
            "flame_graphs": [str(path.relative_to(out.parent)) for path in svg.values()],
        }
    (out / f"profile-{date}.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--out", type=Path, default=RESULTS)
    arguments = parser.parse_args()
    print(json.dumps(run(arguments.clients, arguments.seconds, arguments.out), indent=1))
    sys.exit(0)
