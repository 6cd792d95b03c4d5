"""A real trace collector for the tracing tests: Jaeger v2 (the all-in-one, an OpenTelemetry
Collector distribution with Jaeger's storage and query API), built from its Go module at a
pinned version into the cache outside the repository, and run on loopback with memory storage.

Jaeger rather than the OpenTelemetry Collector alone: a test must read the spans back, and
Jaeger's query API (`/api/traces/{id}`) answers with a whole trace, each span's service, parent
and attributes. Measured: the first build took 3 min 50 s on two cores (module downloads
included); every later run finds it in the cache. One collector serves the whole module.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lessor.controlplane.binaries import build_once, cache_root, run_go, wrapper_module
from lessor.controlplane.ports import PortReservation

JAEGER = "v1.76.0"  # github.com/jaegertracing/jaeger: its cmd/jaeger is Jaeger v2
MISSING_GO = "the Go toolchain is needed to build Jaeger, the tracing tests' collector"


def jaeger_binary() -> Path:
    """The jaeger binary of JAEGER, built once into the cache."""
    target = cache_root() / "bin" / f"jaeger-{JAEGER}"

    def build(go: str, work: Path, out: Path) -> None:
        module = work / "jaeger"
        package = "github.com/jaegertracing/jaeger/cmd/jaeger"
        wrapper_module(module, "lessor.dev/tracing/jaeger", ["go 1.25"])
        run_go(go, ["get", f"{package}@{JAEGER}"], module, print)
        build = ["build", "-trimpath", "-ldflags", "-s -w", "-o", f"{out}/", package]
        run_go(go, build, module, print)

    directory = build_once(
        target,
        (target / "jaeger").is_file,
        build,
        what=f"Jaeger {JAEGER}",
        missing_go=MISSING_GO,
        progress=print,
    )
    return directory / "jaeger"


def _config(otlp: int, query: int, grpc: int) -> dict[str, Any]:
    """Jaeger's all-in-one pipeline cut to what the tests use: OTLP over HTTP in, memory
    storage, the query API; no other receiver, no port of its own telemetry."""
    return {
        "service": {
            "extensions": ["jaeger_storage", "jaeger_query"],
            "pipelines": {
                "traces": {
                    "receivers": ["otlp"],
                    "processors": ["batch"],
                    "exporters": ["jaeger_storage_exporter"],
                }
            },
            "telemetry": {"metrics": {"level": "none"}, "logs": {"level": "warn"}},
        },
        "extensions": {
            "jaeger_query": {
                "storage": {"traces": "memory"},
                "http": {"endpoint": f"127.0.0.1:{query}"},
                "grpc": {"endpoint": f"127.0.0.1:{grpc}"},
            },
            "jaeger_storage": {"backends": {"memory": {"memory": {"max_traces": 10000}}}},
        },
        "receivers": {"otlp": {"protocols": {"http": {"endpoint": f"127.0.0.1:{otlp}"}}}},
        "processors": {"batch": {"timeout": "100ms"}},
        "exporters": {"jaeger_storage_exporter": {"trace_storage": "memory"}},
    }


@dataclass
class Jaeger:
    """A running collector: spans are sent to `otlp_endpoint`, read back from `query`."""

    process: subprocess.Popen[bytes]
    otlp_endpoint: str
    query: str

    def trace(self, trace_id: str) -> dict[str, Any] | None:
        """The trace as the query API answers it ({spans, processes}), None before any span."""
        try:
            with urllib.request.urlopen(f"{self.query}/api/traces/{trace_id}", timeout=10) as r:
                found: list[dict[str, Any]] = json.load(r).get("data") or []
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return None
            raise
        return found[0] if found else None

    def services(self) -> list[str]:
        with urllib.request.urlopen(f"{self.query}/api/services", timeout=10) as answer:
            names: list[str] = json.load(answer).get("data") or []
        return names

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def start_jaeger(directory: Path) -> Jaeger:
    binary = jaeger_binary()
    with PortReservation() as ports:  # held until Jaeger listens (lessor.controlplane.ports)
        otlp, query, grpc = ports.take(), ports.take(), ports.take()
        config = directory / "jaeger.yaml"
        config.write_text(json.dumps(_config(otlp, query, grpc)))  # JSON is YAML
        with (directory / "jaeger.log").open("ab") as log:
            process = subprocess.Popen(
                [str(binary), f"--config=file:{config}"], stdout=log, stderr=subprocess.STDOUT
            )
        jaeger = Jaeger(process, f"http://127.0.0.1:{otlp}", f"http://127.0.0.1:{query}")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if process.poll() is not None:
                output = (directory / "jaeger.log").read_text()[-2000:]
                raise RuntimeError(f"jaeger exited: {output}")
            try:
                jaeger.services()
                return jaeger
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.2)
        jaeger.stop()
    raise RuntimeError("jaeger did not answer within 60s")
