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


def _page(parser: argparse.ArgumentParser, name: str, summary: str) -> str:
    page = Manpage(parser)
    page.prog = name
    page.description = summary
    page.source = f"lessor {__version__}"
    page.manual = "lessor manual"
    page.date = __version__  # reproducible: a page changes only when the parser does
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
