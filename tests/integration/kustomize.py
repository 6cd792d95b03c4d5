"""What the manifest tests share: a kustomization rendered by the real kubectl, and objects
applied by the real kube-apiserver in a server-side dry run (its validation, the CRDs' schemas
and admission, with nothing stored)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from lessor.controlplane.kubectl import Cluster


def kustomize(cluster: Cluster, directory: Path) -> list[dict[str, Any]]:
    text = cluster.kubectl("kustomize", str(directory)).stdout
    return [document for document in yaml.safe_load_all(text) if document]


def dry_run_apply(cluster: Cluster, objects: list[dict[str, Any]]) -> None:
    """Every object accepted, or kube-apiserver's refusal as the failure."""
    result = cluster.kubectl(
        "apply", "--dry-run=server", "-f", "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}),
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("(server dry run)") == len(objects)
