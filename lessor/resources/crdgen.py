"""CustomResourceDefinitions generated from the pydantic models.

The models are the single source of truth: the API server then enforces the same enums, patterns
and bounds that the API and the operator validate with, so an object written with kubectl is held
to the rules an object written through the API is. Kubernetes requires *structural* schemas, so
pydantic's JSON Schema is rewritten: references inlined, optional fields as plain properties
rather than `anyOf` with null, free-form objects marked to keep unknown fields.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from lessor.resources.base import GROUP, VERSION, Resource
from lessor.resources.catalog import RESOURCES

Schema = dict[str, Any]
_KEPT = (
    "type",
    "format",
    "enum",
    "pattern",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "description",
    "x-kubernetes-validations",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
)


def _inline(node: Schema, definitions: Schema) -> Schema:
    ref = node.get("$ref")
    if ref:
        target = dict(definitions[ref.rsplit("/", 1)[1]])
        if "description" in node:
            target["description"] = node["description"]
        if "default" in node:
            target["default"] = node["default"]
        return _inline(target, definitions)
    return node


def _collapse_optional(node: Schema, definitions: Schema) -> Schema:
    """`X | None` arrives as anyOf [X, null]; in a CRD an optional field is simply not required."""
    variants = [v for v in node.get("anyOf", []) if v.get("type") != "null"]
    if not variants:
        return node
    if len(variants) != 1:
        raise ValueError(f"unions are not structural: {node}")
    merged = {**_inline(variants[0], definitions)}
    for key in ("description", "default"):
        if key in node:
            merged[key] = node[key]
    return merged


def _object(node: Schema, definitions: Schema, out: Schema) -> None:
    out["type"] = "object"
    properties = node.get("properties")
    extra = node.get("additionalProperties")
    if properties:
        out["properties"] = {
            name: structural(child, definitions) for name, child in properties.items()
        }
        required = [r for r in node.get("required", []) if r in properties]
        if required:
            out["required"] = required
    elif isinstance(extra, dict) and extra:
        out["additionalProperties"] = structural(extra, definitions)
    else:
        out["x-kubernetes-preserve-unknown-fields"] = True
    if "minProperties" in node:
        out["minProperties"] = node["minProperties"]


def _prose(text: str) -> str:
    """A description as `kubectl explain` should get it: the lines of each paragraph joined.
    A class docstring's line breaks are the source's, and explain, which wraps text itself,
    would keep them too, breaking lines mid-sentence."""
    return "\n\n".join(" ".join(paragraph.split()) for paragraph in text.split("\n\n"))


def structural(node: Schema, definitions: Schema) -> Schema:
    """Rewrite one JSON Schema node (and its children) into a structural OpenAPI v3 schema."""
    node = _collapse_optional(_inline(node, definitions), definitions)
    out: Schema = {key: node[key] for key in _KEPT if key in node}
    if "description" in out:
        out["description"] = _prose(out["description"])
    if "const" in node:
        out["enum"] = [node["const"]]
    if node.get("default") is not None and node.get("type") != "object":
        out["default"] = node["default"]
    kind = node.get("type")
    if kind == "object" or "properties" in node:
        _object(node, definitions, out)
    elif kind == "array":
        out["items"] = structural(node.get("items", {}), definitions)
    elif kind is None and "enum" not in out:
        # Any JSON value (for example a claim value): keep it as it is.
        out["x-kubernetes-preserve-unknown-fields"] = True
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    return out


# What every Kubernetes kind says of the fields it shares, in Kubernetes' own words (their
# schema is the API server's, not the models'), so `kubectl explain` reads as it does for a Pod.
# Not `metadata`'s: kube-apiserver refuses a CRD whose schema says more of it than its type, and
# publishes ObjectMeta's own schema, description included, in its place.
_CONVENTIONS = "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md"
STANDARD_FIELDS: Schema = {
    "apiVersion": {
        "type": "string",
        "description": "APIVersion defines the versioned schema of this representation of an"
        " object. Servers should convert recognized schemas to the latest internal value, and may"
        f" reject unrecognized values. More info: {_CONVENTIONS}#resources",
    },
    "kind": {
        "type": "string",
        "description": "Kind is a string value representing the REST resource this object"
        " represents. Servers may infer this from the endpoint the client submits requests to."
        f" Cannot be updated. In CamelCase. More info: {_CONVENTIONS}#types-kinds",
    },
    "metadata": {"type": "object"},
}


def schema_of(resource: type[Resource[Any, Any]]) -> Schema:
    fields = resource.model_fields
    spec_type = fields["spec"].annotation
    status_type = fields["status"].annotation
    specs: Schema = {}
    for name, model in (("spec", spec_type), ("status", status_type)):
        document = _model_of(model).model_json_schema(by_alias=True, mode="validation")
        definitions = document.pop("$defs", {})
        specs[name] = structural(document, definitions)
    specs["spec"]["description"] = (resource.crd.description or "").strip() or specs["spec"].get(
        "description", ""
    )
    specs["status"]["description"] = "Written by the lessor operator only."
    return {
        "description": resource.crd.description,
        "type": "object",
        "required": ["spec"],
        "properties": {**STANDARD_FIELDS, "spec": specs["spec"], "status": specs["status"]},
    }


def _model_of(annotation: Any) -> Any:
    """The model class inside `Model | None`."""
    arguments = [a for a in getattr(annotation, "__args__", ()) if a is not type(None)]
    return arguments[0] if arguments else annotation


def crd_of(resource: type[Resource[Any, Any]]) -> Schema:
    info = resource.crd
    kind = resource.model_fields["kind"].default
    version: Schema = {
        "name": VERSION,
        "served": True,
        "storage": True,
        "subresources": {"status": {}},
        "schema": {"openAPIV3Schema": schema_of(resource)},
    }
    if info.columns:
        version["additionalPrinterColumns"] = [
            {
                "name": column.name,
                "type": column.type,
                "jsonPath": column.json_path,
                **({"priority": column.priority} if column.priority else {}),
                **({"description": column.description} if column.description else {}),
            }
            for column in info.columns
        ]
    if info.selectable_fields:
        version["selectableFields"] = [{"jsonPath": path} for path in info.selectable_fields]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{info.plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": info.scope,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": info.plural,
                "singular": info.singular,
                "shortNames": list(info.short_names),
                "categories": list(info.categories),
            },
            "versions": [version],
        },
    }


def file_name(resource: type[Resource[Any, Any]]) -> str:
    return f"{GROUP}_{resource.crd.plural}.yaml"


def render_all(*, kustomization: bool = True) -> dict[str, str]:
    """File name to YAML text of every CRD, deterministic byte for byte.

    Without `kustomization`, the CRDs alone: what a Helm chart's `crds/` holds (charts/lessor),
    byte for byte the files of crds/, so that a kustomize install and a Helm install create the
    same definitions.
    """
    header = (
        "# Generated from lessor/resources by `python -m lessor.resources write`; do not edit.\n"
    )
    files = {
        file_name(resource): header + yaml.safe_dump(crd_of(resource), sort_keys=False, width=100)
        for resource in RESOURCES
    }
    if not kustomization:
        return files
    # Named `Kustomization` (no extension) so that `kubectl apply -f crds/` skips it while
    # `manifests/base` can include the directory as a kustomize resource.
    index = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": sorted(files),
    }
    files["Kustomization"] = header + yaml.safe_dump(index, sort_keys=False)
    return files


def write(directory: Path, *, kustomization: bool = True) -> list[str]:
    directory.mkdir(parents=True, exist_ok=True)
    rendered = render_all(kustomization=kustomization)
    for stale in directory.glob(f"{GROUP}_*.yaml"):
        if stale.name not in rendered:
            stale.unlink()
    for name, text in rendered.items():
        (directory / name).write_text(text)
    return sorted(rendered)


def drift(directory: Path, *, kustomization: bool = True) -> list[str]:
    """Files that are missing, different or extra compared with what the models generate."""
    rendered = render_all(kustomization=kustomization)
    problems = []
    for name, text in sorted(rendered.items()):
        path = directory / name
        if not path.exists():
            problems.append(f"{name}: missing")
        elif path.read_text() != text:
            problems.append(f"{name}: differs from the models")
    for path in sorted(directory.glob(f"{GROUP}_*.yaml")):
        if path.name not in rendered:
            problems.append(f"{path.name}: no model generates it")
    return problems
