"""Latency distributions of one benchmark run as a PNG: `python -m bench.plot RESULT.json`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def draw(results: dict[str, Any], path: Path) -> None:
    figure, (latency, burst, api) = plt.subplots(1, 3, figsize=(16, 4.5))
    for clients, row in results["lease_latency"]["clients"].items():
        samples = sorted(row["samples_ms"])
        fractions = [(n + 1) / len(samples) for n in range(len(samples))]
        latency.step(samples, fractions, where="post", label=f"{clients} clients")
    floor = results["lease_latency"]["floor_ms"]["create"]["p50"]
    latency.axvline(floor, linestyle=":", color="grey", label="kube create p50")
    latency.set(xscale="log", xlabel="POST to Bound with kubeconfig (ms)", ylabel="fraction",
                title="warm lease latency (CDF)")  # fmt: skip
    latency.legend()
    bound = results["burst"]["bound_at_s"]
    burst.plot(bound, range(1, len(bound) + 1))
    burst.set(xlabel="seconds after the burst", ylabel="leases Bound",
              title=f"burst of {results['burst']['leases']} leases")  # fmt: skip
    rows = results["api_throughput"]["workers"]
    labels, p50, p99 = [], [], []
    for workers, by_credential in rows.items():
        for credential in ("oidc", "ssh", "session"):
            for endpoint, figures in by_credential[credential].items():
                labels.append(f"{workers}w {credential} {endpoint}")
                p50.append(figures["p50_ms"])
                p99.append(figures["p99_ms"])
    positions = range(len(labels))
    api.barh(list(positions), p99, color="#f4b183", label="p99")
    api.barh(list(positions), p50, color="#5b9bd5", label="p50")
    api.set_yticks(list(positions), labels, fontsize=6)
    api.set(xlabel="ms", title="API latency by workers, credential, endpoint")
    api.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


if __name__ == "__main__":
    source = Path(sys.argv[1])
    draw(json.loads(source.read_text()), source.with_suffix(".png"))
