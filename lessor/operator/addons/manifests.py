"""An addon's manifests, read from the pool (inline) or from a ConfigMap in the operator's
namespace, and parsed into the objects to apply, in the order they are written.

The text is an administrator's (the pool, or a ConfigMap in lessor's own namespace), bounded by
the CRD (inline) and by a ConfigMap's size; it is still parsed as data only (`safe_load_all`),
and each object must name its kind and itself, so a mistake is said before anything is applied.
"""

from __future__ import annotations

from typing import Any

import yaml

from lessor.operator.runtime.client import KubeClient, NotFoundError
from lessor.resources.addons import Addon

MAX_OBJECTS = 500


class ManifestError(Exception):
    """The manifests cannot be applied as written. `lasting`: the same text fails again (a YAML
    or shape error), as opposed to a ConfigMap not there yet."""

    def __init__(self, message: str, *, lasting: bool) -> None:
        super().__init__(message)
        self.lasting = lasting


Manifest = dict[str, Any]


async def text_of(addon: Addon, client: KubeClient, namespace: str) -> str:
    if addon.manifests is not None:
        return addon.manifests
    ref = addon.config_map_ref
    assert ref is not None  # the model requires one of the two
    try:
        found = await client.get(f"/api/v1/namespaces/{namespace}/configmaps/{ref.name}")
    except NotFoundError:
        raise ManifestError(f"ConfigMap {namespace}/{ref.name} not found", lasting=False) from None
    text = found.get("data", {}).get(ref.key)
    if not isinstance(text, str):
        raise ManifestError(f"ConfigMap {namespace}/{ref.name} has no key {ref.key}", lasting=False)
    return text


def parse(text: str) -> list[Manifest]:
    """The objects of a YAML stream, empty documents skipped."""
    try:
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError as error:
        raise ManifestError(f"not YAML: {error}", lasting=True) from None
    objects = [document for document in documents if document is not None]
    if len(objects) > MAX_OBJECTS:
        raise ManifestError(f"more than {MAX_OBJECTS} objects", lasting=True)
    for number, manifest in enumerate(objects, 1):
        _check(number, manifest)
    return objects


def _check(number: int, manifest: object) -> None:
    if not isinstance(manifest, dict):
        raise ManifestError(f"document {number} is not an object", lasting=True)
    metadata = manifest.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    for field, value in (
        ("apiVersion", manifest.get("apiVersion")),
        ("kind", manifest.get("kind")),
        ("metadata.name", name),
    ):
        if not isinstance(value, str) or not value:
            raise ManifestError(f"document {number} has no {field}", lasting=True)
    if manifest["kind"] == "List":
        raise ManifestError(
            f"document {number} is a List: write its items as documents", lasting=True
        )


def describe(manifest: Manifest) -> str:
    """`Kind namespace/name` or `Kind name`, as kubectl says it."""
    namespace = manifest["metadata"].get("namespace")
    name = manifest["metadata"]["name"]
    return f"{manifest['kind']} {namespace}/{name}" if namespace else f"{manifest['kind']} {name}"
