"""Starting and stopping the control plane's processes, and finding them again by pid.

A control plane outlives the command that started it (`python -m lessor.controlplane start`) and,
for leased clusters, the operator process that started it. So each process is recorded by pid and
executable path; before signalling a pid we check that it still runs that executable, because pids
are reused and a stale record must never make us kill an unrelated process.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from lessor.controlplane.errors import ControlPlaneError

_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class ProcessRecord:
    name: str
    pid: int
    executable: str

    def is_running(self) -> bool:
        """True while the pid is alive and still runs the recorded executable (not a zombie)."""
        try:
            exe = str(Path(f"/proc/{self.pid}/exe").readlink())
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except OSError:
            return False
        state = stat.rsplit(")", 1)[1].split()[0]
        return state != "Z" and exe.removesuffix(" (deleted)") == self.executable


def _die_with_parent() -> None:
    """Ask the kernel to kill the child when the test process dies, even by SIGKILL."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def spawn(
    name: str,
    argv: list[str],
    log_path: Path,
    *,
    detached: bool,
    env: dict[str, str] | None = None,
) -> ProcessRecord:
    """Start `argv` with output to `log_path` (and `env`, this process's environment if None).

    Detached processes get their own session and survive their starter; attached ones are tied to
    the starter's life so that an interrupted test run leaves nothing behind.
    """
    executable = os.path.realpath(argv[0])
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [executable, *argv[1:]],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
            # Spawned from the main thread before any worker threads start, where it is safe.
            preexec_fn=None if detached else _die_with_parent,  # noqa: PLW1509
        )
    _children[process.pid] = process
    return ProcessRecord(name=name, pid=process.pid, executable=executable)


# Popen objects of processes started by this interpreter, kept so that they are reaped (no zombies).
_children: dict[int, subprocess.Popen[bytes]] = {}


def _reap(pid: int) -> None:
    child = _children.get(pid)
    if child is not None and child.poll() is not None:
        del _children[pid]


def terminate(record: ProcessRecord, *, grace: float = 10.0) -> None:
    """SIGTERM, wait up to `grace` seconds, then SIGKILL; returns once the process is gone."""
    if not record.is_running():
        _reap(record.pid)
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        try:
            os.kill(record.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            _reap(record.pid)
            if not record.is_running():
                _reap(record.pid)
                return
            time.sleep(0.05)
    if record.is_running():
        raise ControlPlaneError(f"{record.name} (pid {record.pid}) did not stop")


def _start_time(pid: int) -> str | None:
    """The pid's start time (clock ticks since boot), which tells a process from a later one that
    reuses its pid; None once it is gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else fields[19]


def processes_mentioning(path: str) -> list[int]:
    """The processes with `path` (or a path under it) in an argument of their command line.

    The command line names what a process works on (etcd's `--data-dir=...`, the operator's
    `--local-backend-dir=...`), so this finds processes that escaped every pid record: started
    after the record was written, or by a process that died before recording them. `/tmp/x` does
    not match `/tmp/x2`.
    """
    pattern = re.compile(rb"(?:^|[=,:\s])" + re.escape(path.encode()) + rb"(?:/|$|[,:\s])")
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            arguments = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(pattern.search(argument) for argument in arguments):
            found.append(int(entry.name))
    return found


def stop_processes_mentioning(path: str, *, grace: float = 10.0, rounds: int = 5) -> list[int]:
    """SIGTERM every process mentioning `path` (except this one), SIGKILL what outlives `grace`,
    and look again: a process being stopped may have started another meanwhile (an operator in
    the middle of starting a cluster). Returns the pids stopped."""
    stopped: list[int] = []
    for _ in range(rounds):
        targets = {
            pid: started
            for pid in processes_mentioning(path)
            if pid != os.getpid() and (started := _start_time(pid)) is not None
        }
        if not targets:
            break
        stopped += targets
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            for pid in targets:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            if _wait_gone(targets, wait):
                break
    return stopped


def _wait_gone(targets: dict[int, str], timeout: float) -> bool:
    """Wait until every process of `targets` (pid: start time) is gone; whether they all are."""
    deadline = time.monotonic() + timeout
    while True:
        for pid in list(targets):
            _reap(pid)
            if _start_time(pid) != targets[pid]:
                del targets[pid]
        if not targets or time.monotonic() >= deadline:
            return not targets
        time.sleep(0.05)
