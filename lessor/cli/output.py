"""Printing for people (aligned text) and for scripts: `-o json`, `-o yaml` or
`-o jsonpath=EXPR`, one document on stdout.

`jsonpath` takes kubectl's form, `{.id}` or `{.items[*].id}` (the braces may be left out), as
jsonpath-ng reads it: each match is printed, separated by spaces, an object or a list as JSON.

The commands that list things (`status`, `get`, `config list`) also take `-o name`, kubectl's:
one `kind/id` a line (`lease/l0123abcd4567`, `sandbox/s...`, `pool/ci-small`), and
`--no-headers`, their text tables without the header row.

Escape codes (the progress line's erase, any colour to come) go only where `ansi()` allows.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
from collections.abc import Sequence
from typing import Any, TextIO

DATA_FORMATS = ("json", "yaml")
NAME = "name"


def output_format(value: str, *, wide: bool = False, names: bool = False) -> str:
    """`-o`'s value, checked: text, json, yaml, jsonpath=EXPR (and wide, name where offered)."""
    if value.startswith("jsonpath="):
        _expression(value)  # a typo fails before any request
        return value
    offered = ("text", *(["wide"] if wide else []), *DATA_FORMATS, *([NAME] if names else []))
    if value in offered:
        return value
    choices = ", ".join((*offered, "jsonpath=EXPR"))
    raise argparse.ArgumentTypeError(f"{value!r} is not one of {choices}")


def _expression(value: str) -> Any:
    from jsonpath_ng.ext.parser import parse as parse_jsonpath  # noqa: PLC0415 - 60 ms to load

    text = value.removeprefix("jsonpath=").strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    try:
        return parse_jsonpath("$" + text if text.startswith((".", "[")) else text)
    except Exception as error:
        raise argparse.ArgumentTypeError(f"jsonpath: {error}") from None


def wants_names(args: argparse.Namespace) -> bool:
    """Whether the output is `-o name`: `kind/id` lines."""
    return bool(getattr(args, "output", "text") == NAME)


def names(kinds_and_ids: Sequence[tuple[str | None, str]]) -> None:
    """`-o name`: one `kind/id` a line, as kubectl prints them; a `None` kind prints the id
    alone (a config target, which `--target` takes as it is)."""
    for kind, name in kinds_and_ids:
        print(name if kind is None else f"{kind}/{name}")


def ansi(stream: TextIO) -> bool:
    """Whether escape codes may be written to `stream`: a terminal, not TERM=dumb (a terminal
    that interprets none, as Emacs' shell), and no NO_COLOR (https://no-color.org: set and not
    empty). Every escape the CLI writes asks this first."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except ValueError:  # closed
        return False


def wants_json(args: argparse.Namespace) -> bool:
    """Whether the output is for a script (json, yaml, jsonpath), not text."""
    chosen = getattr(args, "output", "text")
    return bool(chosen in DATA_FORMATS or chosen.startswith("jsonpath="))


def emit(args: argparse.Namespace, data: Any) -> None:
    chosen = getattr(args, "output", "json")
    if chosen == "yaml":
        import yaml  # noqa: PLC0415 - only for -o yaml

        print(yaml.safe_dump(data, sort_keys=True), end="")
    elif chosen.startswith("jsonpath="):
        found = [match.value for match in _expression(chosen).find(data)]
        print(" ".join(v if isinstance(v, str) else json.dumps(v) for v in found))
    else:
        print(json.dumps(data, indent=2, sort_keys=True))


def fields(rows: Sequence[tuple[str, object]]) -> None:
    """`name   value` lines, the names padded to one column."""
    width = max((len(name) for name, _ in rows), default=0)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


def table(
    headers: Sequence[str], rows: Sequence[Sequence[object]], *, no_headers: bool = False
) -> None:
    """Aligned columns; `no_headers` (`--no-headers`) leaves the header row out, and the
    columns are as wide as their cells only."""
    cells = [] if no_headers else [[str(h) for h in headers]]
    cells += [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max((len(row[i]) for row in cells), default=0) for i in range(len(headers))]
    for row in cells:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )


def until(timestamp: str | None) -> str:
    """`2026-11-22T18:45:00Z (in 14m58s)`: the absolute time and how far away it is."""
    if not timestamp:
        return "-"
    away = relative(timestamp)
    return timestamp if away == timestamp else f"{timestamp} ({away})"


def _seconds_from_now(timestamp: str) -> int | None:
    """Seconds from now to `timestamp` (negative: past); None when it is not a time."""
    try:
        moment = datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return int((moment - datetime.datetime.now(datetime.UTC)).total_seconds())


def age(timestamp: str | None) -> str:
    """How long ago, as kubectl says it: `45s`, `3m`, `2h`, `4d`; `-` without a time."""
    if not timestamp:
        return "-"
    left = _seconds_from_now(timestamp)
    if left is None:
        return timestamp
    ago = max(0, -left)
    for unit, seconds in (("d", 86400), ("h", 3600), ("m", 60)):
        if ago >= seconds:
            return f"{ago // seconds}{unit}"
    return f"{ago}s"


def relative(timestamp: str | None) -> str:
    """`in 14m58s`, `passed`, or `-` without a time."""
    if not timestamp:
        return "-"
    left = _seconds_from_now(timestamp)
    if left is None:
        return timestamp
    if left <= 0:
        return "passed"
    hours, rest = divmod(left, 3600)
    minutes, seconds = divmod(rest, 60)
    span = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "")
    return f"in {span or f'{seconds}s'}"
