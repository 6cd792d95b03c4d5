"""Durations as people write them in policies and on the command line: "90s", "30m", "1h30m".

One parser serves the CRDs, the API and the CLI, so a duration that one part accepts every other
part accepts too. The pattern is written for RE2 as well (no look-ahead), because the API server
enforces the same pattern from the CRD schema.
"""

from __future__ import annotations

import datetime
import re
from typing import Annotated

from pydantic import AfterValidator, Field

PATTERN = r"^(([0-9]+h)([0-9]+m)?([0-9]+s)?|([0-9]+m)([0-9]+s)?|([0-9]+s))$"
_PARTS = re.compile(r"^(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?$")  # ASCII digits only
EXAMPLES = '"90s", "30m", "1h", "1h30m"'
# No duration lessor accepts is longer than a year: a lease, an extension, a TTL cap, a
# timeout. Everything computed from them (an expiry is at most a TTL and 100 extensions) then
# stays far from datetime's limits, so no stored object can make a reconcile overflow.
LONGEST = datetime.timedelta(hours=8760)
LONGEST_TEXT = "8760h"


def parse_duration(text: str) -> datetime.timedelta:
    """Parse hours, minutes and seconds components, in that order, each optional but not all."""
    match = _PARTS.match(text) if text else None
    if match is None or not any(match.groups()):
        raise ValueError(f"invalid duration {text!r}: use hours, minutes, seconds like {EXAMPLES}")
    hours, minutes, seconds = (int(part or 0) for part in match.groups())
    try:
        return datetime.timedelta(hours=hours, minutes=minutes, seconds=seconds)
    except OverflowError as error:
        raise ValueError(f"invalid duration {text!r}: too long") from error


def format_duration(value: datetime.timedelta) -> str:
    """The canonical spelling: 5400 s is "1h30m", 90 s is "1m30s", zero is "0s"."""
    total = int(value.total_seconds())
    if total < 0:
        raise ValueError("durations are never negative")
    hours, rest = divmod(total, 3600)
    minutes, seconds = divmod(rest, 60)
    text = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "")
    text += f"{seconds}s" if seconds or not text else ""
    return text


def _positive(text: str) -> str:
    value = parse_duration(text)
    if value <= datetime.timedelta(0):
        raise ValueError(f"duration {text!r} must be longer than zero")
    if value > LONGEST:
        raise ValueError(f"duration {text!r} is longer than {LONGEST_TEXT} (a year), the most")
    return text


# The pattern and the bounds go into JSON Schema (and so the CRDs, where CEL checks the bounds
# for anyone writing an object directly); in Python the parser validates, with a message that
# says what a duration looks like instead of quoting a regular expression.
_SCHEMA = Field(
    json_schema_extra={
        "pattern": PATTERN,
        "maxLength": 32,
        "x-kubernetes-validations": [
            {
                "rule": f"duration(self) > duration('0s') && "
                f"duration(self) <= duration('{LONGEST_TEXT}')",
                "message": f"a duration longer than zero and at most {LONGEST_TEXT} (a year)",
            }
        ],
    }
)
PositiveDuration = Annotated[str, _SCHEMA, AfterValidator(_positive)]
