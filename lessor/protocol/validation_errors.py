"""A pydantic ValidationError as one line a person can act on, for every component that reports
one: `targets.ci.endpoint: ...; rules.0.pools: ...`.

Only each problem's location and message, never the input it was about: the input can be a
tenant's bytes or an administrator's object, and the line goes to logs, Events and statuses.
"""

from __future__ import annotations

from pydantic import ValidationError

PROBLEMS_SHOWN = 10


def describe(error: ValidationError, root: str = "object") -> str:
    problems = error.errors(include_input=False, include_url=False)
    text = "; ".join(
        f"{'.'.join(str(part) for part in problem['loc']) or root}: {problem['msg']}"
        for problem in problems[:PROBLEMS_SHOWN]
    )
    if len(problems) > PROBLEMS_SHOWN:
        text += f"; and {len(problems) - PROBLEMS_SHOWN} more"
    return text
