"""The per-identity ceiling of open attach and port-forward sessions (session_slots), with real
worker processes sharing one file as a server's gunicorn workers do."""

from __future__ import annotations

import multiprocessing
import os
import signal
from multiprocessing.synchronize import Event
from pathlib import Path

import pytest

from lessor.apiserver.state.session_slots import SessionSlots


def test_an_identity_gets_its_ceiling_and_a_released_slot_back(tmp_path: Path) -> None:
    slots = SessionSlots(2, tmp_path)
    first, second = slots.claim("alice"), slots.claim("alice")
    assert first is not None and second is not None
    assert slots.claim("alice") is None
    assert slots.claim("bob") is not None, "another identity has slots of its own"
    slots.release(first)
    assert slots.claim("alice") is not None


def _hold_then_wait(directory: Path, identity: str, held: Event) -> None:
    assert SessionSlots(1, directory).claim(identity) is not None
    held.set()
    signal.pause()  # a worker in the middle of its session, until killed


def test_the_workers_of_one_server_share_the_ceiling_and_a_killed_one_leaks_nothing(
    tmp_path: Path,
) -> None:
    context = multiprocessing.get_context("spawn")
    held = context.Event()
    worker = context.Process(target=_hold_then_wait, args=(tmp_path, "alice", held))
    worker.start()
    try:
        assert held.wait(120)
        slots = SessionSlots(1, tmp_path)
        assert slots.claim("alice") is None, "the other worker's session counts"
        os.kill(worker.pid or 0, signal.SIGKILL)  # no release: a crash mid-session
        worker.join(120)
        assert slots.claim("alice") is not None, "the dead worker's slot is reclaimed"
    finally:
        worker.kill()


def test_a_ceiling_below_one_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        SessionSlots(0, tmp_path)
