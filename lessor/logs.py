"""How lessor's processes write log lines: one setup for the operator and the API server.

Every line is one record on stderr, in either of two formats a log pipeline reads without a
custom parser: `text` is logfmt (`time=... level=info logger=... msg="..." key=value`), what
people read in `kubectl logs` and Loki or Vector parse; `json` is one object per line. A record's
`extra` fields (a request's id, route and status) become keys of their own, so a query can
select on them instead of grepping a message.

The API server runs under gunicorn, which configures logging itself when it starts and, left to
its defaults, gave lessor's own loggers no handler: their INFO lines were dropped and warnings
came out bare, without time or level. `gunicorn_config` is the same setup in the form gunicorn
applies (`logconfig_dict`), so its master, its workers and lessor's code write one format.
"""

from __future__ import annotations

import datetime
import json
import logging
import logging.config
from typing import Any, Literal

Format = Literal["text", "json"]
FORMATS: tuple[Format, ...] = ("text", "json")
LEVELS = ("debug", "info", "warning", "error")

# The attributes every LogRecord has; any other attribute came from `extra`.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "taskName",
}
# Libraries whose INFO lines are one per HTTP request they make: noise at INFO.
_QUIET = ("httpx", "httpcore", "urllib3", "kubernetes", "kr8s", "aiohttp.access")


class LineFormatter(logging.Formatter):
    """One record, one line: logfmt (`text`) or a JSON object (`json`)."""

    def __init__(self, output: Format = "text") -> None:
        super().__init__()
        self.output = output

    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields |= {  # the record's `extra` fields; one without a value is left out
            key: value
            for key, value in vars(record).items()
            if value is not None and key not in _STANDARD | fields.keys() and key[0] != "_"
        }
        if record.exc_info:
            fields["error"] = self.formatException(record.exc_info)
        if self.output == "json":
            return json.dumps(fields, default=str)
        return " ".join(f"{key}={_logfmt_value(value)}" for key, value in fields.items())


def _logfmt_value(value: object) -> str:
    """A value as logfmt writes it: bare when it is one plain word, else a quoted string with
    escapes (JSON's, which logfmt readers accept), so a message never splits into keys and a
    newline in a tenant's input never starts a line of its own."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if text and all(c.isprintable() and c not in ' ="\\' for c in text):
        return text
    return json.dumps(text)


def dict_config(level: str = "info", output: Format = "text") -> dict[str, Any]:
    """The setup as a logging.config.dictConfig document."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"line": {"()": LineFormatter, "output": output}},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "stream": "ext://sys.stderr",
                "formatter": "line",
            }
        },
        "root": {"level": level.upper(), "handlers": ["stderr"]},
        "loggers": {name: {"level": "WARNING"} for name in _QUIET},
    }


def configure(level: str = "info", output: Format = "text") -> None:
    logging.config.dictConfig(dict_config(level, output))


def gunicorn_config(level: str = "info", output: Format = "text") -> dict[str, Any]:
    """For gunicorn's `logconfig_dict`: its own loggers propagate to the root's one handler.
    Its access log is left without a handler; the API server writes its own request lines,
    which carry what gunicorn's cannot (the route, the caller, the request id)."""
    config = dict_config(level, output)
    config["loggers"] |= {
        "gunicorn.error": {"level": level.upper(), "handlers": [], "propagate": True},
        "gunicorn.access": {"level": "CRITICAL", "handlers": [], "propagate": False},
    }
    return config
