"""The values table of a Helm chart's README.md (charts/lessor), generated from the chart itself.

A hand-kept table of values drifts from the chart the first time someone adds a value and
forgets the README, and the README is what Artifact Hub and `helm show readme` show. So the
table is made from the two places a value is already described: the comment above its key in
values.yaml (what a user reading values.yaml sees) and values.schema.json (its type, which Helm
enforces). The prose around the table stays hand-written; the table sits between two markers
and `python -m lessor.resources check chart-readme --chart CHART` fails when it is stale.

Each key of values.yaml is one row: a section (an object whose keys the schema names) gets a
row of its own and then rows for its keys; anything else (a map, a list, a scalar, a Kubernetes
type, which the schema gives a `title`) is one row, its default written as JSON. Every row
needs a description, from the comment above its key (or after it on the same line), else from
the schema's `description`: an undocumented value is an error, not an empty cell. Comment lines
indented by two spaces or more after `#` are an example, rendered as a YAML block under
"Examples" after the table.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

BEGIN = (
    "<!-- values table: generated from values.yaml and values.schema.json by "
    "`python -m lessor.resources write chart-readme --chart <chart>`; do not edit -->"
)
END = "<!-- end of the generated values table -->"

Schema = dict[str, Any]

_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_][A-Za-z0-9_.-]*):(?P<rest>.*)$")
# An inline comment: a `#` after whitespace, outside quotes (values.yaml's scalars are simple).
_INLINE = re.compile(r"""^[^'"#]*?\s#\s?(?P<text>.*)$""")


class ChartReadmeError(Exception):
    """The chart cannot be documented as it stands (an undocumented or unschemaed value)."""


@dataclass
class _Entry:
    path: tuple[str, ...]
    prose: list[str] = field(default_factory=list)
    example: list[str] = field(default_factory=list)


def _comments(lines: list[str]) -> list[_Entry]:
    """Every key of values.yaml in file order, with the comment block above it (or the comment
    after it on its line). Nesting comes from indentation, as YAML's block style has it."""
    entries: list[_Entry] = []
    stack: list[tuple[int, str]] = []
    pending: list[str] = []
    for line in lines:
        stripped = line.strip()
        if not stripped:
            pending = []
            continue
        if stripped.startswith("#"):
            pending.append(stripped[1:])
            continue
        match = _KEY.match(line)
        if match is None:
            pending = []
            continue
        indent = len(match["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, match["key"]))
        entry = _Entry(tuple(key for _, key in stack))
        for text in pending:
            # `#   accessPolicies:`: an example, kept as YAML; `# Where ...`: prose.
            if text.startswith("  ") and text.strip():
                entry.example.append(text)
            elif text.strip():
                entry.prose.append(text.strip())
        inline = _INLINE.match(match["rest"])
        if not entry.prose and inline is not None:
            entry.prose.append(inline["text"].strip())
        entries.append(entry)
        pending = []
    return entries


def _resolve(node: Schema, root: Schema) -> Schema:
    while "$ref" in node:
        reference = str(node["$ref"])
        if not reference.startswith("#/"):
            raise ChartReadmeError(f"values.schema.json: only local references, not {reference}")
        target: Any = root
        for part in reference[2:].split("/"):
            target = target[part]
        node = target
    return node


def _schema_at(path: tuple[str, ...], root: Schema) -> Schema | None:
    node = _resolve(root, root)
    for key in path:
        properties = node.get("properties", {})
        if key not in properties:
            return None
        node = _resolve(properties[key], root)
    return node


def _is_section(node: Schema) -> bool:
    """A node of the chart's own keys; a Kubernetes type (one with a `title`: Affinity,
    PodSecurityContext) is one value, however many keys the schema knows of it."""
    return (
        "properties" in node and node.get("additionalProperties") is False and "title" not in node
    )


def _type(node: Schema, root: Schema) -> str:
    node = _resolve(node, root)
    if "title" in node:
        return str(node["title"])
    if "enum" in node:
        return "one of " + ", ".join(f"`{json.dumps(value)}`" for value in node["enum"])
    kinds = node.get("type", "any")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    named: list[str] = []
    for kind in kinds:
        if kind == "array" and isinstance(node.get("items"), dict):
            items = _resolve(node["items"], root)
            named.append(f"list of {_type(items, root)}")
        elif kind == "object" and isinstance(node.get("additionalProperties"), dict):
            named.append(f"map of {_type(node['additionalProperties'], root)}")
        else:
            named.append(str(kind))
    return " or ".join(named)


def _value_at(values: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        values = values[key]
    return values


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_table(chart: Path) -> str:
    """The markdown between the markers: the table, then the examples of values.yaml."""
    text = (chart / "values.yaml").read_text()
    values = yaml.safe_load(text) or {}
    root: Schema = json.loads((chart / "values.schema.json").read_text())
    rows = ["| value | type | default | description |", "|---|---|---|---|"]
    examples: list[str] = []
    leaves: list[tuple[str, ...]] = []
    for entry in _comments(text.splitlines()):
        if any(entry.path[: len(leaf)] == leaf for leaf in leaves):
            continue  # inside a map or list value: its keys are data, not values of the chart
        name = ".".join(entry.path)
        node = _schema_at(entry.path, root)
        if node is None:
            raise ChartReadmeError(f"values.yaml: {name} is not in values.schema.json")
        description = " ".join(entry.prose) or str(node.get("description", ""))
        if not description:
            raise ChartReadmeError(
                f"values.yaml: {name} is undocumented (a comment above it in values.yaml, or "
                "a description in values.schema.json)"
            )
        if entry.example:
            # "For example (...):" in values.yaml, where the example follows.
            ending = " see" if description.endswith(":") else " See"
            description += f"{ending} [Examples](#examples)."
            indent = min(len(line) - len(line.lstrip()) for line in entry.example)
            examples += ["", f"`{name}`:", "", "```yaml"]
            examples += [line[indent:] for line in entry.example]
            examples.append("```")
        if _is_section(node):
            rows.append(f"| `{name}` | object |  | {_cell(description)} |")
            continue
        leaves.append(entry.path)
        default = json.dumps(_value_at(values, entry.path), separators=(", ", ": "))
        rows.append(
            f"| `{name}` | {_cell(_type(node, root))} | `{_cell(default)}` | {_cell(description)} |"
        )
    if examples:
        rows += ["", "### Examples", *examples]
    return "\n".join(rows) + "\n"


def render(chart: Path) -> str:
    """README.md with its table generated anew: everything outside the markers is kept."""
    readme = (chart / "README.md").read_text()
    start, end = readme.find(BEGIN), readme.find(END)
    if start < 0 or end < start:
        raise ChartReadmeError(
            f"{chart / 'README.md'}: the markers of the values table are missing:\n{BEGIN}\n{END}"
        )
    return readme[: start + len(BEGIN)] + "\n" + render_table(chart) + readme[end:]


def write(chart: Path) -> bool:
    """Regenerate the table; whether README.md changed."""
    rendered = render(chart)
    path = chart / "README.md"
    if path.read_text() == rendered:
        return False
    path.write_text(rendered)
    return True


def stale(chart: Path) -> bool:
    return (chart / "README.md").read_text() != render(chart)
