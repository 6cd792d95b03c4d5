"""Printing for people (aligned text) and for scripts (`-o json`, one document on stdout)."""

from __future__ import annotations

import argparse
import datetime
import json
from collections.abc import Sequence
from typing import Any


def wants_json(args: argparse.Namespace) -> bool:
    return getattr(args, "output", "text") == "json"


def emit_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True))


def fields(rows: Sequence[tuple[str, object]]) -> None:
    """`name   value` lines, the names padded to one column."""
    width = max((len(name) for name, _ in rows), default=0)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
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


def relative(timestamp: str | None) -> str:
    """`in 14m58s`, `passed`, or `-` without a time."""
    if not timestamp:
        return "-"
    try:
        moment = datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return timestamp
    left = int((moment - datetime.datetime.now(datetime.UTC)).total_seconds())
    if left <= 0:
        return "passed"
    hours, rest = divmod(left, 3600)
    minutes, seconds = divmod(rest, 60)
    span = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "")
    return f"in {span or f'{seconds}s'}"
