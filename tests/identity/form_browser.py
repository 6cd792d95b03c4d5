"""A browser for the login tests: what a person does in one, done by an HTTP client.

`python -m tests.identity.form_browser URL` (the CLI's `BROWSER`) opens URL with a cookie jar,
follows redirects, and on each HTML page submits its form as a person would: the username and
password from LESSOR_TEST_USER and LESSOR_TEST_PASSWORD, hidden fields as they are, and the
button whose value is LESSOR_TEST_CHOICE (default `accept`; `deny` to refuse). It stops when a
page has no form: the CLI's loopback "login complete" page, or an error page. Each page visited
is appended to LESSOR_TEST_BROWSER_LOG, when set, so a test can see the way it went.
"""

from __future__ import annotations

import http.cookiejar
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from html.parser import HTMLParser
from pathlib import Path


class Form(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.action: str | None = None
        self.fields: dict[str, str] = {}
        self.buttons: list[tuple[str, str]] = []
        self._inside = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {k: v or "" for k, v in attrs}
        if tag == "form" and self.action is None:
            self.action = attributes.get("action", "")
            self._inside = True
        elif self._inside and tag == "input" and attributes.get("name"):
            self.fields[attributes["name"]] = attributes.get("value", "")
        elif self._inside and tag == "button" and attributes.get("name"):
            self.buttons.append((attributes["name"], attributes.get("value", "")))

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._inside = False


def browse(
    url: str,
    *,
    user: str,
    password: str,
    choice: str = "accept",
    log: str | None = None,
    max_pages: int = 10,
) -> str:
    """The last page's text, after submitting every form on the way."""
    opener = urllib.request.build_opener(
        urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
    )
    data: bytes | None = None
    for _ in range(max_pages):
        try:
            with opener.open(urllib.request.Request(url, data=data), timeout=30) as answer:
                url, page = answer.geturl(), answer.read().decode(errors="replace")
        except urllib.error.HTTPError as error:
            url, page = error.geturl() or url, error.read().decode(errors="replace")
        if log:
            with Path(log).open("a", encoding="utf-8") as record:
                record.write(urllib.parse.urlsplit(url)._replace(query="").geturl() + "\n")
        form = Form()
        form.feed(page)
        if form.action is None:
            return page
        fields = dict(form.fields)
        if "username" in fields:
            fields["username"] = user
        if "password" in fields:
            fields["password"] = password
        for name, value in form.buttons:
            if value == choice:
                fields[name] = value
        url = urllib.parse.urljoin(url, form.action)
        data = urllib.parse.urlencode(fields).encode()
    raise SystemExit(f"still on a form after {max_pages} pages: {url}")


if __name__ == "__main__":
    last = browse(
        sys.argv[1],
        user=os.environ.get("LESSOR_TEST_USER", ""),
        password=os.environ.get("LESSOR_TEST_PASSWORD", ""),
        choice=os.environ.get("LESSOR_TEST_CHOICE", "accept"),
        log=os.environ.get("LESSOR_TEST_BROWSER_LOG"),
    )
    print(last[:200])
