"""The addons that tests/integration/test_addons.py, e2e/test_addons.py and bench/addons.py
prepare clusters with: a manifest (`WIDGETS`), and a real Helm chart repository: a small chart
built here (a CRD, a ConfigMap from its values, a Deployment), packaged and indexed by the pinned
helm, and served over HTTP with its index.yaml, as any chart repository is."""

from __future__ import annotations

import functools
import http.server
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from e2e.kind.registry import ensure_registry
from lessor.controlplane.helm import ensure_helm
from lessor.controlplane.ports import reserved_port


def crd(singular: str, kind: str) -> str:
    """A namespaced CRD of the group example.com that keeps whatever its objects hold."""
    return f"""
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: {singular}s.example.com}}
spec:
  group: example.com
  names: {{plural: {singular}s, singular: {singular}, kind: {kind}}}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema: {{openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}}}
"""


WIDGETS = f"""
apiVersion: v1
kind: Namespace
metadata: {{name: ci}}
---{crd("widget", "Widget")}---
# A kind the CRD above makes served a moment after it is applied: applied at a later pass.
apiVersion: example.com/v1
kind: Widget
metadata: {{name: first, namespace: ci}}
"""

GADGETS = {
    "Chart.yaml": "apiVersion: v2\nname: gadgets\nversion: 0.3.1\n",
    "values.yaml": "greeting: hello\nreplicas: 1\nimage: registry.k8s.io/pause:3.10\n",
    "crds/gadgets.yaml": crd("gadget", "Gadget"),
    # No namespace in the templates, as most charts write them: the release's namespace.
    "templates/settings.yaml": """
apiVersion: v1
kind: ConfigMap
metadata: {name: {{ .Release.Name }}-settings}
data: {greeting: {{ .Values.greeting | quote }}, namespace: {{ .Release.Namespace | quote }}}
""",
    "templates/controller.yaml": """
apiVersion: apps/v1
kind: Deployment
metadata: {name: {{ .Release.Name }}-controller}
spec:
  replicas: {{ .Values.replicas }}
  selector: {matchLabels: {app: gadgets}}
  template:
    metadata: {labels: {app: gadgets}}
    spec:
      containers:
        - name: controller
          image: {{ .Values.image }}
          imagePullPolicy: IfNotPresent
          command: {{ .Values.command | default list | toJson }}
          resources: {requests: {cpu: 5m, memory: 16Mi}}
""",
}


@contextmanager
def gadgets_in_a_registry(work: Path) -> Iterator[str]:
    """The gadgets chart pushed to a real OCI registry (distribution's, the one the kind e2e
    builds, e2e/kind/registry.py) on loopback, over plain HTTP and without credentials, which
    helm pulls from loopback as it is; yields the chart's reference, oci://.../gadgets."""
    helm = str(ensure_helm(lambda _: None))
    binary = ensure_registry(lambda _: None)
    package = work / "gadgets-package"
    _build_gadgets(work / "gadgets", package)
    port, reservation = reserved_port()
    config = work / "registry.yml"
    config.write_text(
        "version: 0.1\n"
        f"storage: {{filesystem: {{rootdirectory: {work / 'registry'}}}}}\n"
        f"http: {{addr: '127.0.0.1:{port}'}}\n"
    )
    reservation.release()
    with (work / "registry.log").open("ab") as log:
        process = subprocess.Popen([str(binary), "serve", str(config)], stdout=log, stderr=log)
    try:
        host = f"127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while subprocess.run(
            [helm, "push", "--plain-http", str(next(package.glob("*.tgz"))), f"oci://{host}/charts"],
            capture_output=True, check=False, env={"HOME": str(work), "PATH": "/usr/bin:/bin"},
        ).returncode:  # fmt: skip
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError(f"the registry did not take the chart: {config}")
            time.sleep(0.2)
        yield f"oci://{host}/charts/gadgets"
    finally:
        process.terminate()
        process.wait(timeout=30)


def _build_gadgets(source: Path, packaged: Path) -> None:
    """The gadgets chart written into `source` and packaged into `packaged`."""
    helm = str(ensure_helm(lambda _: None))
    for name, text in GADGETS.items():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_text(text)
    packaged.mkdir()
    subprocess.run(
        [helm, "package", str(source), "-d", str(packaged)], check=True, capture_output=True
    )


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def serve_gadgets(work: Path, address: str = "127.0.0.1") -> Iterator[str]:
    """The gadgets chart (version 0.3.1) in a repository on `address`; yields its URL."""
    helm = str(ensure_helm(lambda _: None))
    served = work / "repository"
    _build_gadgets(work / "gadgets", served)
    handler = functools.partial(_QuietHandler, directory=str(served))
    server = http.server.ThreadingHTTPServer((address, 0), handler)
    url = f"http://{address}:{server.server_address[1]}"
    subprocess.run(
        [helm, "repo", "index", str(served), "--url", url], check=True, capture_output=True
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield url
    finally:
        server.shutdown()
