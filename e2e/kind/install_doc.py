"""docs/install.md, run as a platform team would run it: its marked shell blocks, in order.

A block marked `<!-- run -->` is one of the install's steps; one marked `<!-- run: STAGE -->`
belongs to another stage, run on its own: `upgrade from 0.1` (before the install, on a release
of the previous version) and `at the end` (the uninstall, when the suite is done with the
installation). A stage's blocks run in one bash with `set -euo pipefail`, so the variables a step
exports are there for the next, as in the reader's terminal; every stage starts with the doc's
first block, which sets them. Nothing of the text is changed but what names this machine: the
registry's address, its credentials and a local port (`Substitution`), and each of those must
still be in the text, so that a doc rewritten without them fails here rather than running
against example.com.

A failing step is reported by its section's title, with the block and the last lines it printed;
a secret's value never is (`Substitution.secret`).
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "install.md"
MARKER = re.compile(
    r"^<!-- run(?:: ([a-z0-9. ]+))? -->\n```sh\n(.*?)^```$", re.MULTILINE | re.DOTALL
)
INSTALL = "install"
SECTION = re.compile(r"^## (.+)$", re.MULTILINE)
STEP = "::lessor-install-doc-step::"
OUTPUT_TAIL = 4000


@dataclass(frozen=True)
class Block:
    section: str
    code: str
    stage: str


@dataclass(frozen=True)
class Substitution:
    """One string of the doc that names a machine (`registry.example.com`), and this one's."""

    example: str
    actual: str
    secret: bool = False


def blocks(text: str) -> list[Block]:
    """The doc's marked blocks, each with the title of the section it is in."""
    titles = [(m.start(), m.group(1)) for m in SECTION.finditer(text)]
    found = []
    for match in MARKER.finditer(text):
        section = next((t for at, t in reversed(titles) if at < match.start()), "(top)")
        found.append(Block(section, match.group(2), match.group(1) or INSTALL))
    return found


def substituted(text: str, substitutions: list[Substitution]) -> str:
    for substitution in substitutions:
        if substitution.example not in text:
            raise AssertionError(f"docs/install.md no longer says {substitution.example!r}")
        text = text.replace(substitution.example, substitution.actual)
    return text


def script(chosen: list[Block]) -> str:
    """One bash script of the blocks, each announced on stderr so a failure names its step."""
    parts = ["set -euo pipefail"]
    for number, block in enumerate(chosen):
        parts.append(f"echo '{STEP}{number}' >&2")
        parts.append(block.code)
    return "\n".join(parts) + "\n"


def run(
    cwd: Path,
    env: dict[str, str],
    substitutions: list[Substitution],
    *,
    stage: str = INSTALL,
    timeout: float = 1200,
) -> str:
    """Run the doc's first block and then the blocks of `stage`, in `cwd`, with `env` as the
    whole environment (the reader's shell: tools on PATH, their home)."""
    every = blocks(substituted(DOC.read_text(), substitutions))
    chosen = [every[0], *(b for b in every[1:] if b.stage == stage)]
    if len(chosen) == 1 and stage != INSTALL:
        raise AssertionError(f"docs/install.md has no block of the stage {stage!r}")
    # From a file only its owner reads, not `bash -c`: the registry's password would be on a
    # command line any process of the machine can read.
    with tempfile.NamedTemporaryFile("w", suffix=".sh", dir=cwd, delete=False) as written:
        written.write(script(chosen))
    try:
        result = subprocess.run(
            ["bash", written.name], cwd=cwd, env=env,
            capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip
    finally:
        Path(written.name).unlink()
    if result.returncode != 0:
        steps = [int(line.removeprefix(STEP)) for line in result.stderr.splitlines()
                 if line.startswith(STEP)]  # fmt: skip
        failed = chosen[steps[-1]] if steps else chosen[0]
        said = "\n".join(
            line for line in (result.stdout + result.stderr).splitlines()
            if not line.startswith(STEP)
        )[-OUTPUT_TAIL:]  # fmt: skip
        report = (
            f"docs/install.md, section {failed.section!r}: exit {result.returncode} in\n"
            f"{failed.code}\nlast output:\n{said}"
        )
        for substitution in substitutions:
            if substitution.secret:
                report = report.replace(substitution.actual, "<secret>")
        raise AssertionError(report)
    return result.stdout
