"""docs/api-reference.md, rendered from the OpenAPI document the server serves at
/openapi.json, so the reference cannot drift from the models (a unit test fails when it does).

    python -m lessor.apiserver.routes.reference write docs/api-reference.md
    python -m lessor.apiserver.routes.reference check docs/api-reference.md
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lessor.apiserver.routes.app import api_document as document
from lessor.protocol.json_object import Json

_METHODS = ("get", "post", "patch", "delete")
_CONSTRAINTS = (
    ("pattern", "pattern"),
    ("maxLength", "max length"),
    ("minimum", "min"),
    ("maximum", "max"),
    ("default", "default"),
)


def _type(schema: Json) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in schema:
        return " or ".join(_type(option) for option in schema["anyOf"])
    if schema.get("type") == "array":
        return f"array of {_type(schema.get('items', {}))}"
    if "enum" in schema:
        return " \\| ".join(f"`{value}`" for value in schema["enum"])
    return str(schema.get("type", "any"))


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _notes(descriptions: list[str], constraints: Json) -> str:
    """A field's or a parameter's notes cell: what it means, then (in brackets) the rules it
    obeys."""
    text = " ".join(d for d in descriptions if d)
    rules = []
    for key, label in _CONSTRAINTS:
        value = constraints.get(key)
        if value is not None:
            spelled = str(value).lower() if isinstance(value, bool) else value  # JSON's spelling
            rules.append(f"{label} `{spelled}`")
    if rules:
        text = f"{text} ({', '.join(rules)})" if text else ", ".join(rules)
    return _cell(text)


def _schema(name: str, schema: Json) -> list[str]:
    lines = [f"### {name}", ""]
    if schema.get("description"):
        lines += [_cell(schema["description"]), ""]
    properties: Json = schema.get("properties", {})
    if not properties:
        return [*lines, f"Type: {_type(schema)}.", ""]
    required = set(schema.get("required", []))
    lines += ["| field | type | required | notes |", "|---|---|---|---|"]
    for field, spec in properties.items():
        # An optional field is anyOf [its schema, null]: its constraints sit on the first.
        options = [o for o in spec.get("anyOf", []) if o.get("type") != "null"]
        constraints = {**(options[0] if options else {}), **spec}
        notes = _notes([spec.get("description", "")], constraints)
        lines.append(
            f"| `{field}` | {_type(spec)} | {'yes' if field in required else 'no'} | {notes} |"
        )
    return [*lines, ""]


def _query_parameters(spec: Json) -> list[str]:
    lines = [
        "",
        "## Query parameters",
        "",
        "| method | path | parameter | type | required | notes |",
        "|---|---|---|---|---|---|",
    ]
    for path, item in spec["paths"].items():
        for method in _METHODS:
            for parameter in item.get(method, {}).get("parameters", []):
                if parameter["in"] != "query":
                    continue
                schema = parameter["schema"]
                notes = _notes(
                    [parameter.get("description", ""), schema.get("description", "")], schema
                )
                lines.append(
                    f"| {method.upper()} | `{path}` | `{parameter['name']}` | {_type(schema)} | "
                    f"{'yes' if parameter.get('required') else 'no'} | {notes} |"
                )
    return lines


def render() -> str:
    spec = document()
    lines = [
        "# API reference",
        "",
        f"Generated from the OpenAPI document of lessor {spec['info']['version']} (served at "
        "`/openapi.json`) by "
        "`python -m lessor.apiserver.routes.reference write docs/api-reference.md`;"
        " do not edit. Behaviour, errors and authentication: [api.md](api.md).",
        "",
        "## Endpoints",
        "",
        "| method | path | auth | summary | success | request | errors |",
        "|---|---|---|---|---|---|---|",
    ]
    for path, item in spec["paths"].items():
        for method in _METHODS:
            if method not in item:
                continue
            operation = item[method]
            responses = operation["responses"]
            success = next(code for code in responses if code[0] in "12")  # 101: WebSockets
            content = responses[success].get("content", {}).get("application/json", {})
            answer = f"{success} {_type(content['schema'])}" if content else success
            request = operation.get("requestBody", {}).get("content", {})
            body = _type(request["application/json"]["schema"]) if request else ""
            errors = ", ".join(code for code in responses if code[0] not in "12")
            auth = "optional" if operation.get("security") == [] else "required"
            lines.append(
                f"| {method.upper()} | `{path}` | {auth} | {operation['summary']} | {answer} | "
                f"{body} | {errors} |"
            )
    lines += _query_parameters(spec)
    lines += ["", "## Schemas", ""]
    for name, schema in sorted(spec["components"]["schemas"].items()):
        lines += _schema(name, schema)
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lessor.apiserver.routes.reference")
    parser.add_argument("action", choices=("write", "check"))
    parser.add_argument("path", type=Path)
    args = parser.parse_args(argv)
    text = render()
    if args.action == "write":
        args.path.write_text(text)
        return 0
    if not args.path.exists() or args.path.read_text() != text:
        print(
            f"{args.path} is stale: python -m lessor.apiserver.routes.reference write {args.path}"
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
