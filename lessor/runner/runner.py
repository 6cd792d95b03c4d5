"""lessor-runner: runs one command in a sandbox for lessor, and answers for it afterwards.

It is started through the Kubernetes pods/exec API with one JSON request on stdin (so the
command's argv never appears in an audit log) and prints one JSON answer on stdout:

    {"op": "start", "id": ID, "argv": [...], "cwd": DIR|null, "timeout": SECONDS}
    {"op": "status", "id": ID, "wait": SECONDS}     (wait: until it ends, at most 10 s)
    {"op": "logs", "id": ID, "stdoutOffset": N, "stderrOffset": N, "limit": BYTES, "wait": S}
    {"op": "cancel", "id": ID}

`start` reserves the execution with an atomic mkdir of its state directory before anything
runs: a second `start` of the same id (a retried request, a replayed reconcile) finds the
directory and answers with the existing state, so a command never runs twice. The command then
runs without a shell, in its own process group, under a supervisor process that is detached
from the exec connection (double fork, new session) and so outlives it. The supervisor keeps at
most CAP bytes of each stream (the rest is dropped and `truncated` recorded), records the exit
code and start and finish times, and signals the whole process group on cancel or timeout
(SIGTERM, then SIGKILL after a grace period), and also when the command ends, so that nothing
it started lingers. When the supervisor itself is gone before recording an outcome, `status`
answers Unknown: the command may or may not have finished, and must not be rerun blindly.

Standard library only, one file: an image can carry it as a script (`python3 runner.py`).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

CAP = 1024 * 1024  # bytes retained per stream
KILL_GRACE = 2.0  # seconds between SIGTERM and SIGKILL of the process group
WINDOW = 64 * 1024  # largest logs window
TERMINAL = ("Succeeded", "Failed", "Cancelled", "TimedOut", "Unknown")
Json = dict[str, Any]


def base_dir() -> Path:
    return Path(os.environ.get("LESSOR_RUNNER_DIR") or "/tmp/lessor-runner")  # noqa: S108


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def write_json(path: Path, document: Json) -> None:
    """Atomically: a reader sees the old document or the new one, never half of one."""
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(document))
    temporary.replace(path)


def read_json(path: Path) -> Json | None:
    try:
        document: Json = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return document


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (dead, not yet reaped) counts as gone.
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][:1] != "Z"
    return True


# -- the supervisor ------------------------------------------------------------------------


def _copy(stream: Any, path: Path, flags: dict[str, bool]) -> None:
    kept = 0
    with path.open("ab") as out:
        while chunk := stream.read1(65536):
            room = CAP - kept
            if len(chunk) > room:
                flags["truncated"] = True
                chunk = chunk[: max(0, room)]
            if chunk:
                out.write(chunk)
                out.flush()
                kept += len(chunk)


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def _stop_group(pgid: int, child: subprocess.Popen[bytes]) -> None:
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + KILL_GRACE
    while child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    _signal_group(pgid, signal.SIGKILL)


def supervise(directory: Path) -> None:
    request = read_json(directory / "request.json") or {}
    state: Json = {"state": "Running", "startedAt": now(), "supervisor": os.getpid()}
    try:
        child = subprocess.Popen(
            request["argv"],
            cwd=request.get("cwd") or None,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own session and process group
        )
    except OSError as error:
        state.update(state="Failed", finishedAt=now(), message=f"could not start: {error}")
        write_json(directory / "state.json", state)
        return
    pgid = child.pid
    state["pgid"] = pgid
    write_json(directory / "state.json", state)
    flags = {"truncated": False}
    copiers = [
        threading.Thread(target=_copy, args=(stream, directory / name, flags), daemon=True)
        for stream, name in ((child.stdout, "stdout"), (child.stderr, "stderr"))
    ]
    for copier in copiers:
        copier.start()
    deadline = time.monotonic() + float(request.get("timeout") or 60)
    outcome = None
    while child.poll() is None:
        if (directory / "cancel").exists():
            outcome = "Cancelled"
        elif time.monotonic() >= deadline:
            outcome = "TimedOut"
        if outcome:
            _stop_group(pgid, child)
            break
        time.sleep(0.05)
    code = child.wait()
    _signal_group(pgid, signal.SIGKILL)  # whatever the command left behind in its group
    for copier in copiers:
        copier.join(timeout=5)
    state.update(
        state=outcome or ("Succeeded" if code == 0 else "Failed"),
        finishedAt=now(),
        truncated=flags["truncated"],
    )
    # An exit code only when the process reported one; a signal death is recorded as such.
    state.update({"exitCode": code} if code >= 0 else {"signal": -code})
    write_json(directory / "state.json", state)


def _detach(directory: Path) -> None:
    """Double fork: the supervisor is reparented away from the exec session and keeps running
    when the connection that started it closes."""
    if os.fork() > 0:
        return
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    try:
        supervise(directory)
    finally:
        os._exit(0)


# -- the operations ------------------------------------------------------------------------


ANSWERED = ("state", "exitCode", "signal", "startedAt", "finishedAt", "message", "truncated")


def status(directory: Path) -> Json:
    """The execution's state as an answer: the known fields of state.json only (it records
    more, such as process ids, and its directory is writable by the command itself)."""
    if not directory.is_dir():
        return {"state": None, "error": "no such execution"}
    state = read_json(directory / "state.json")
    if state is None:
        return {"state": "Queued"}
    if state.get("state") == "Running" and not alive(int(state.get("supervisor") or 0)):
        # Re-read: the supervisor may have finished between the two reads.
        state = read_json(directory / "state.json") or state
        if state.get("state") == "Running":
            state.update(state="Unknown", message="the supervisor ended without an outcome")
    return {field: state[field] for field in ANSWERED if field in state}


def wait(directory: Path, seconds: float) -> Json:
    """The status once the execution is over, or after `seconds` (at most 10): one exec call
    instead of a poll per tick for a caller waiting on the outcome."""
    deadline = time.monotonic() + min(max(seconds, 0.0), 10.0)
    while (state := status(directory))["state"] not in (*TERMINAL, None):
        if time.monotonic() >= deadline:
            break
        time.sleep(0.02)
    return state


def start(directory: Path, request: Json) -> Json:
    try:
        directory.mkdir(parents=False)
    except FileExistsError:
        return {**status(directory), "existing": True}
    write_json(directory / "request.json", request)
    (directory / "stdout").touch()
    (directory / "stderr").touch()
    _detach(directory)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not (directory / "state.json").exists():
        time.sleep(0.01)
    return status(directory)


def _window(path: Path, offset: int, limit: int) -> Json:
    size = path.stat().st_size if path.exists() else 0
    offset = max(0, min(offset, size))
    with path.open("rb") as stream:
        stream.seek(offset)
        data = stream.read(min(limit, WINDOW))
    end = offset + len(data)
    return {"data": base64.b64encode(data).decode(), "nextOffset": end, "more": end < size}


def logs(directory: Path, request: Json) -> Json:
    # The state first (after an optional wait for the end): a terminal state means both files
    # are complete, so windows read after it cannot miss output.
    state = wait(directory, float(request.get("wait") or 0))
    if state["state"] is None:
        return state
    limit = int(request.get("limit") or WINDOW)
    return {
        **state,
        "stdout": _window(directory / "stdout", int(request.get("stdoutOffset") or 0), limit),
        "stderr": _window(directory / "stderr", int(request.get("stderrOffset") or 0), limit),
    }


def cancel(directory: Path) -> Json:
    state = status(directory)
    if state["state"] in (*TERMINAL, None):
        return state
    (directory / "cancel").touch()
    deadline = time.monotonic() + KILL_GRACE + 5
    while time.monotonic() < deadline:
        state = status(directory)
        if state["state"] in TERMINAL:
            break
        time.sleep(0.05)
    return state


def answer(request: Json) -> Json:
    execution = str(request.get("id") or "")
    if not execution or "/" in execution or execution.startswith("."):
        return {"state": None, "error": "a request needs a plain execution id"}
    base_dir().mkdir(parents=True, exist_ok=True)
    directory = base_dir() / execution
    op = request.get("op")
    if op == "start":
        return start(directory, request)
    if op == "status":
        return wait(directory, float(request.get("wait") or 0))
    if op == "logs":
        return logs(directory, request)
    if op == "cancel":
        return cancel(directory)
    return {"state": None, "error": f"unknown op {op!r}"}


def main() -> int:
    try:
        request = json.loads(sys.stdin.readline())
    except ValueError:
        print(json.dumps({"state": None, "error": "the request is not JSON"}))
        return 2
    print(json.dumps(answer(request)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
