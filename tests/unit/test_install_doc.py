"""docs/install.md's marked blocks, as the kind e2e will run them (e2e/kind/install_doc.py):
found in every section that installs something, each valid bash, and the strings the suite
replaces with its own machine's still in the text."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from e2e.kind import install_doc

SUITES_SUBSTITUTIONS = (
    "registry.example.com",
    "platform-ci",
    "change-me",
    "127.0.0.1:8000",
    "8000:80",
)


def test_every_step_of_the_install_is_a_block_the_suite_runs() -> None:
    found = install_doc.blocks(install_doc.DOC.read_text())
    sections = [b.section for b in found if b.stage == install_doc.INSTALL]
    assert sections[0].startswith("1."), "the first block sets the variables the others read"
    for step in ("2.", "3.", "4.", "5.", "6."):
        assert any(s.startswith(step) for s in sections), f"no block runs section {step}"
    assert [b.section for b in found if b.stage == "at the end"] == ["7. Uninstall"]
    assert [b.section for b in found if b.stage == "upgrade from 0.1"] == ["6. Upgrade"]


@pytest.mark.parametrize("block", install_doc.blocks(install_doc.DOC.read_text()),
                         ids=lambda b: b.section)  # fmt: skip
def test_each_block_is_valid_bash(block: install_doc.Block) -> None:
    checked = subprocess.run(
        ["bash", "-n"], input=block.code, capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stderr


def test_a_substitution_the_doc_lost_is_an_error_not_a_run_against_example_com() -> None:
    text = install_doc.DOC.read_text()
    for example in SUITES_SUBSTITUTIONS:
        assert example in text
    lost = install_doc.Substitution("registry.example.org", "10.0.0.1:5000")
    with pytest.raises(AssertionError, match="no longer says"):
        install_doc.substituted(text, [lost])


def test_a_failing_step_is_named_by_its_section_and_no_secret_is_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = tmp_path / "install.md"
    doc.write_text(
        "## 1. Set\n\n<!-- run -->\n```sh\nexport X=1\n```\n\n"
        "## 2. Break\n\n<!-- run -->\n```sh\necho about to fail with s3cret\n"
        'test "$X" = 2\n```\n'
    )
    monkeypatch.setattr(install_doc, "DOC", doc)
    hidden = [install_doc.Substitution("s3cret", "hunter2", secret=True)]
    with pytest.raises(AssertionError, match=r"(?s)section '2. Break'.*about to fail") as failed:
        install_doc.run(tmp_path, dict(os.environ), hidden, timeout=30)
    assert "hunter2" not in str(failed.value), "a secret's value is never in the report"
