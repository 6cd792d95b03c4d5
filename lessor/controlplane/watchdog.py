"""A watchdog that stops what a run started once the run is gone, however it ended.

A test session, the demo or a benchmark starts control planes, operators and API servers, and
the operators start `local` clusters whose processes are meant to outlive them (so that a
restarted operator re-adopts them). Their own cleanup runs on a normal end and on Ctrl-C, but not
on SIGKILL, an out-of-memory kill or a CI timeout, and then dozens of etcd and kube-apiserver
processes would run on with nothing to stop them.

So such a run keeps everything under one private directory (its *tree*: a fresh temporary
directory) and calls `watch_over(tree)` first. That starts `python -m
lessor.controlplane.watchdog TREE` in its own session (a Ctrl-C at the terminal does not reach
it), holding the read end of a pipe whose write end only the run holds. When the run ends, for
whatever reason, the kernel closes the write end; the watchdog reads end-of-file and stops every
process whose command line names a path in the tree (lessor.controlplane.processes), looking
again until none is left, and with `--remove` deletes the tree.

After a normal end there is nothing left to stop, and the watchdog only confirms it. The tree
must be the run's own: any process naming it is taken for one of the run's.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from lessor.controlplane.processes import stop_processes_mentioning

# This process's watchdogs and the write ends of their pipes, held until this process ends.
_held: list[tuple[subprocess.Popen[bytes], int]] = []


def watch_over(tree: Path, *, remove: bool = False) -> None:
    """Stop every process naming `tree` once this process is gone (and delete the tree if
    `remove`). Call it before starting anything under the tree."""
    read, write = os.pipe()  # neither end is inherited by other children (PEP 446)
    argv = [sys.executable, "-m", "lessor.controlplane.watchdog", str(tree.resolve())]
    watchdog = subprocess.Popen(
        [*argv, "--remove"] if remove else argv,
        stdin=read,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    os.close(read)
    _held.append((watchdog, write))


def _say(message: str) -> None:
    # The run's stderr may be gone with it (a closed pipe): the watchdog's work matters more.
    with contextlib.suppress(OSError):
        print(f"lessor watchdog: {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lessor.controlplane.watchdog",
        description="Wait for end-of-file on stdin (the run that started this is gone), then stop "
        "every process whose command line names a path under TREE.",
    )
    parser.add_argument("tree", type=Path)
    parser.add_argument("--remove", action="store_true", help="then delete TREE")
    args = parser.parse_args(argv)
    while os.read(0, 4096):
        pass  # nobody writes; only end-of-file matters
    stopped = stop_processes_mentioning(str(args.tree))
    if stopped:
        _say(f"the run that owned {args.tree} is gone; stopped {len(stopped)} process(es) it left")
    if args.remove:
        shutil.rmtree(args.tree, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
