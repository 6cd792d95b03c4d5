"""Man pages for `lessor` and each of its commands, generated from the argparse parser with
argparse-manpage, so they cannot disagree with `--help`.

    python -m lessor.cli.manpages write man/man1   # regenerate
    python -m lessor.cli.manpages check man/man1   # exit 1 naming the stale pages

The pages are committed and installed by pip into <prefix>/share/man/man1 (setup.cfg
data_files), where `man lessor` and `man lessor-lease` find them; a test fails when they are stale.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from argparse_manpage.manpage import Manpage

from lessor import __version__
from lessor.cli.parser import build_parser

# Only the server commands lack their own page: `lessor apiserver --help` documents them.
_WITHOUT_PAGE = {"apiserver", "operator"}


# What every page ends with: where lessor reads its settings, what it writes, how it exits.
ENVIRONMENT = """.TP
.B LESSOR_ENDPOINT, LESSOR_TARGET
the endpoint, or the named target, instead of the config's current one
(\\fB--endpoint\\fR, \\fB--target\\fR)
.TP
.B LESSOR_TOKEN
a static token (or a CI job's OIDC token) sent as a Bearer token; with LESSOR_ENDPOINT,
all a CI job needs
.TP
.B LESSOR_DEBUG
1 traces every HTTP exchange on stderr, as \\fB-v\\fR does (credentials left out)
.TP
.B TRACEPARENT
a W3C trace context (a CI job's span): every request of the command joins that trace
.TP
.B LESSOR_COMPLETION_TIMEOUT
seconds shell completion waits for the server for lease ids and pools (default 5)
.TP
.B SSH_AUTH_SOCK
the ssh-agent whose Ed25519 key signs requests of an ssh target
.TP
.B XDG_CONFIG_HOME
where lessor/ holds the files below (default ~/.config)
.TP
.B KUBECONFIG
its first file is where \\fBlessor kubeconfig --merge\\fR merges (default ~/.kube/config)
.TP
.B HTTPS_PROXY, NO_PROXY
honoured by every request, the sessions of attach and port-forward included (a CONNECT tunnel)
"""
FILES = """.TP
.B $XDG_CONFIG_HOME/lessor/config.json
named targets (mode 0600: it may hold a static token)
.TP
.B $XDG_CONFIG_HOME/lessor/sessions.json
session tokens from \\fBlessor login\\fR, per endpoint (mode 0600)
.TP
.B $XDG_CONFIG_HOME/lessor/kubeconfigs.json
the kubeconfig files and merged contexts written for each lease, which
\\fBlessor release\\fR removes
.TP
.B ~/.kube/lessor-<id>
a lease's kubeconfig (mode 0600), unless \\fB--kubeconfig\\fR says otherwise
"""
EXIT_STATUS = """.TP
.B 0
success
.TP
.B 1
server error, endpoint unreachable, or a lease that ended where it was waited for
.TP
.B 2
usage error: a bad flag or value, an invalid config, a 400 from the server
.TP
.B 3
authentication or permission (401, 403, not logged in)
.TP
.B 4
not found (lease, pool, target)
.TP
.B 5
timed out (\\fB--wait-timeout\\fR, \\fB--timeout\\fR)
.TP
.B 6
refused: a conflict or a limit (409, 429)
.TP
.B 130
interrupted
"""


def _page(parser: argparse.ArgumentParser, name: str, summary: str) -> str:
    page = Manpage(parser)
    page.prog = name
    page.description = summary
    page.source = f"lessor {__version__}"
    page.manual = "lessor manual"
    page.date = __version__  # reproducible: a page changes only when the parser does
    for heading, content in (
        ("environment", ENVIRONMENT),
        ("files", FILES),
        ("exit status", EXIT_STATUS),
    ):
        page.add_section(heading, "=", content)
    return str(page)


def pages() -> dict[str, str]:
    # argparse wraps usage lines to the terminal's width: fix it, or the pages depend on it.
    os.environ["COLUMNS"] = "100"
    parser = build_parser()
    result = {"lessor.1": _page(parser, "lessor", "lease ephemeral Kubernetes clusters")}
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    summaries = {choice.dest: choice.help or "" for choice in commands._choices_actions}
    for name, command in commands.choices.items():
        if name not in _WITHOUT_PAGE:
            result[f"lessor-{name}.1"] = _page(command, f"lessor-{name}", summaries.get(name, ""))
    return result


def stale(directory: Path) -> list[str]:
    expected = pages()
    present = {path.name for path in directory.glob("lessor*.1")}
    wrong = [
        name
        for name, text in expected.items()
        if not (directory / name).exists() or (directory / name).read_text() != text
    ]
    return sorted(wrong + sorted(present - set(expected)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lessor.cli.manpages")
    parser.add_argument("action", choices=("write", "check"))
    parser.add_argument("directory", type=Path)
    args = parser.parse_args(argv)
    if args.action == "write":
        args.directory.mkdir(parents=True, exist_ok=True)
        for old in args.directory.glob("lessor*.1"):
            old.unlink()
        for name, text in pages().items():
            (args.directory / name).write_text(text)
        return 0
    wrong = stale(args.directory)
    for name in wrong:
        print(f"stale: {args.directory / name} (python -m lessor.cli.manpages write)")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
