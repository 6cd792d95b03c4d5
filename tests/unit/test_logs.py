"""Log lines as a log pipeline reads them: one record per line, every field a key of its own."""

from __future__ import annotations

import io
import json
import logging
import re

import pytest

from lessor.logs import LineFormatter

# A logfmt line: key=value pairs, a value bare or a quoted string with escapes.
PAIR = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|[^\s"]*)(?: |$)')


def parse_logfmt(line: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    position = 0
    while position < len(line):
        match = PAIR.match(line, position)
        assert match, f"not logfmt at {position}: {line!r}"
        key, value = match.groups()
        fields[key] = json.loads(value) if value.startswith('"') else value
        position = match.end()
    return fields


def emit(output: str, message: str, *args: object, **extra: object) -> str:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(LineFormatter(output))  # type: ignore[arg-type]
    logger = logging.getLogger(f"lessor.test.{output}")
    logger.propagate = False
    logger.handlers = [handler]
    try:
        raise ValueError("boom")
    except ValueError:
        logger.error(message, *args, exc_info=bool(extra.pop("failing", False)), extra=extra)
    return stream.getvalue()


HOSTILE = 'a "quoted" word=x\nlevel=error forged line\\'


def test_a_text_line_is_logfmt_that_no_message_can_split_or_forge() -> None:
    text = emit("text", "lease %s refused: %s", "l-1", HOSTILE, route="/v1/leases", status=403)
    assert text.count("\n") == 1, "one record, one line"
    fields = parse_logfmt(text.rstrip("\n"))
    assert fields["msg"] == f"lease l-1 refused: {HOSTILE}"
    assert fields["level"] == "error"
    assert fields["logger"] == "lessor.test.text"
    assert fields["route"] == "/v1/leases"
    assert fields["status"] == "403"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", fields["time"])


@pytest.mark.parametrize("output", ["text", "json"])
def test_an_exception_stays_in_its_record(output: str) -> None:
    line = emit(output, "reconcile failed", failing=True)
    assert line.count("\n") == 1
    fields = json.loads(line) if output == "json" else parse_logfmt(line.rstrip("\n"))
    assert "ValueError: boom" in fields["error"]


def test_a_json_line_is_one_object_with_extra_fields_as_keys() -> None:
    record = json.loads(emit("json", "done", request_id="r-1", duration_ms=1.5, identity=None))
    assert record["msg"] == "done"
    assert record["request_id"] == "r-1"
    assert record["duration_ms"] == 1.5
    assert "identity" not in record, "a field without a value is left out"
    assert {"time", "level", "logger"} <= set(record)
