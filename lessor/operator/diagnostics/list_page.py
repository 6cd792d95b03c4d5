"""Reading a list page from a leased cluster without parsing it whole.

A page is as large as the page bound allows and shaped by the cluster's tenant: 8 MiB of
`{},{},...` parses to over 200 MiB of Python objects. The capture files the raw bytes and needs
only two things from them: `metadata.continue`, to ask for the next page, and a few fields of
each pod, for the log step. Both are decoded one JSON value at a time, each from a window of at
most WINDOW bytes (grown from a few KiB, so that a small value costs a small window), so reading
a page costs what one window decodes to, whatever the page holds; and the head is looked for in
the first HEAD_BYTES only, so a page of a million tiny members before `items` costs no more.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass

WINDOW = 256 * 1024
FIRST_WINDOW = 4 * 1024  # grown fourfold up to WINDOW
HEAD_BYTES = 64 * 1024
_DECODER = json.JSONDecoder()
_SPACE = re.compile(rb"[ \t\n\r]*")


class PageError(ValueError):
    """The page is not a JSON object of the expected shape at this point (or ends there)."""


class TooLargeError(PageError):
    """A value is larger than WINDOW: the bound, not the page, stops the reading here."""


@dataclass(frozen=True)
class Head:
    continue_token: str | None
    items: int | None  # where the `items` array starts, when the page has one


def read_head(page: bytes) -> Head:
    """`metadata.continue` and where `items` starts, read from the members before `items`.

    The API server writes kind, apiVersion and metadata first; members after `items` are never
    read (a token there ends the list), so the items are not decoded to find it.
    """
    offset = _expect(page, 0, b"{")
    token: str | None = None
    if _peek(page, offset) == b"}":
        return Head(None, None)
    while True:
        key, offset = _value(page, _space(page, offset))
        if not isinstance(key, str):
            raise PageError(f"before byte {offset}: a member's name expected")
        offset = _space(page, _expect(page, offset, b":"))
        if key == "items":
            return Head(token, offset)
        value, offset = _value(page, offset)
        if key == "metadata" and isinstance(value, dict):
            found = value.get("continue")
            token = found if isinstance(found, str) and found else None
        if _peek(page, offset) == b"}":
            return Head(token, None)
        offset = _expect(page, offset, b",")
        if offset > HEAD_BYTES:
            raise TooLargeError(f"more than {HEAD_BYTES} bytes before its items")


def items(page: bytes, offset: int) -> Iterator[object]:
    """The elements of the array at `offset`, decoded one at a time; PageError where the page
    stops being one (a page cut at its bound ends so)."""
    offset = _expect(page, offset, b"[")
    if _peek(page, offset) == b"]":
        return
    while True:
        item, offset = _value(page, _space(page, offset))
        yield item
        if _peek(page, offset) == b"]":
            return
        offset = _expect(page, offset, b",")


def _value(page: bytes, offset: int) -> tuple[object, int]:
    """The JSON value at `offset` and the offset just past it, decoded from a window grown
    until the value fits in it."""
    size = FIRST_WINDOW
    while True:
        window = page[offset : offset + size]
        # surrogateescape: any byte sequence decodes, and encodes back to the same bytes below.
        text = window.decode("utf-8", "surrogateescape")
        full = len(window) == size
        try:
            value, end = _DECODER.raw_decode(text)
        except json.JSONDecodeError as error:
            if not full:
                raise PageError(f"at byte {offset}: {error.msg}") from None
        else:
            if not full or end < len(text):  # else a number the window may have cut
                return value, offset + len(text[:end].encode("utf-8", "surrogateescape"))
        if size >= WINDOW:
            raise TooLargeError(f"a value at byte {offset} is larger than {WINDOW} bytes")
        size = min(size * 4, WINDOW)


def _space(page: bytes, offset: int) -> int:
    found = _SPACE.match(page, offset)
    return found.end() if found else offset


def _peek(page: bytes, offset: int) -> bytes:
    """The next byte that is not white space."""
    start = _space(page, offset)
    return page[start : start + 1]


def _expect(page: bytes, offset: int, char: bytes) -> int:
    """The offset just past `char`, the next byte that is not white space."""
    start = _space(page, offset)
    if page[start : start + 1] != char:
        raise PageError(f"at byte {start}: {char.decode()} expected")
    return start + 1
