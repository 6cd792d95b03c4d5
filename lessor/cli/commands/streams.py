"""`lessor attach` and `lessor port-forward`: WebSocket sessions with a sandbox
(lessor.cli.stream_client; frames in lessor.protocol.stream_frames).

attach: on a terminal, the terminal is put in raw mode (every key goes to the sandbox, Ctrl-C
included), its size is sent at the start and on every SIGWINCH, and Ctrl-] detaches, as in
telnet. Otherwise stdin is copied as it comes, and the session lasts until the server ends it.

port-forward: the first session is opened before listening, so a port the pool does not
declare, or a lease that is not Ready, is refused at once with the server's reason. Then each
accepted local connection gets a session of its own, like kubectl's port-forward. When the lease
ends, the command ends.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import select
import signal
import socket
import sys
import termios
import threading
import tty
from collections.abc import Iterator
from urllib.parse import urlencode

from lessor.cli import context
from lessor.cli.client import Client
from lessor.cli.errors import INTERRUPTED, SERVER, USAGE, CliError
from lessor.cli.stream_client import Closed, StreamClient
from lessor.protocol.error_reasons import SpecReason
from lessor.protocol.stream_frames import (
    ACCESS_REVOKED,
    LEASE_ENDED,
    NORMAL,
    RESIZE,
    STDERR,
    STDIN,
    STDOUT,
)

ESCAPE = b"\x1d"  # Ctrl-]
PORT_NUMBER = re.compile(r"^[0-9]{1,5}$")  # ASCII digits: str.isdigit also takes "²"
REMOTE_PORT = re.compile(r"^([1-9][0-9]{0,4}|[a-z]([-a-z0-9]{0,13}[a-z0-9])?)$")
# Refusals that mean the lease is no longer there to talk to.
LEASE_GONE: tuple[SpecReason, ...] = ("expired", "not_found", "not_ready")


def attach(args: argparse.Namespace) -> int:
    client = context.client(args)
    interactive = sys.stdin.isatty() and sys.stdout.isatty()
    query = {"tty": "true" if interactive else "false"}
    if args.container:
        query["container"] = args.container
    path = f"/v1/sandbox-leases/{args.lease_id}/attach?{urlencode(query)}"
    session = StreamClient.open(client, path)
    ended: list[Closed] = []
    reader = threading.Thread(target=_print_output, args=(session, ended), daemon=True)
    reader.start()
    resized = threading.Event()
    try:
        with _raw_terminal(interactive):
            if interactive:
                # Said once the terminal is raw, so that whoever reads it can type at once.
                print(f"attached to {args.lease_id}; Ctrl-] detaches\r", file=sys.stderr)
                resized.set()  # the first size goes at once
                # The handler only flags it: sending from a signal handler could interleave
                # with a frame the main thread is sending.
                signal.signal(signal.SIGWINCH, lambda *_: resized.set())
            detached = _copy_stdin(session, reader, interactive, resized)
    except KeyboardInterrupt:
        session.end()
        return INTERRUPTED
    if detached:
        session.end()
        reader.join(2)
        print(f"\r\ndetached from {args.lease_id}", file=sys.stderr)
        return 0
    reader.join()
    closed = ended[0]
    if closed.code == NORMAL:
        return 0
    raise CliError(closed.message, SERVER)


def _print_output(session: StreamClient, ended: list[Closed]) -> None:
    sinks = {STDOUT: sys.stdout.buffer, STDERR: sys.stderr.buffer}
    try:
        while True:
            for channel, payload in session.receive():
                sink = sinks.get(channel)
                if sink is not None:
                    sink.write(payload)
                    sink.flush()
    except Closed as closed:
        ended.append(closed)


def _copy_stdin(
    session: StreamClient, reader: threading.Thread, interactive: bool, resized: threading.Event
) -> bool:
    """Copy stdin until the session ends (False) or the user detaches (True), and the terminal's
    size whenever it changed. After the end of stdin the session goes on, as the sandbox may
    still write."""
    fd = sys.stdin.fileno()
    reading = True
    while reader.is_alive():
        if resized.is_set():
            resized.clear()
            _send_size(session)
        if not reading:
            reader.join(0.2)
            continue
        ready, _, _ = select.select([fd], [], [], 0.2)
        if not ready:
            continue
        data = os.read(fd, 4096)
        if not data:
            reading = False
            continue
        if interactive and ESCAPE in data:
            before = data.split(ESCAPE, 1)[0]
            if before:
                session.send(STDIN, before)
            return True
        session.send(STDIN, data)
    return False


def _send_size(session: StreamClient) -> None:
    size = os.get_terminal_size(sys.stdout.fileno())
    payload = f'{{"width": {size.columns}, "height": {size.lines}}}'.encode()
    with contextlib.suppress(OSError):
        session.send(RESIZE, payload)


@contextlib.contextmanager
def _raw_terminal(interactive: bool) -> Iterator[None]:
    if not interactive:
        yield
        return
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    tty.setraw(fd)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def port_forward(args: argparse.Namespace) -> int:
    local, remote = _ports(args.ports)
    client = context.client(args)
    path = f"/v1/sandbox-leases/{args.lease_id}/port-forward?{urlencode({'port': remote})}"
    StreamClient.open(client, path).close()  # refusals now, not at the first connection
    try:
        listener = socket.create_server((args.address, local))
    except OSError as error:
        raise CliError(f"cannot listen on {args.address}:{local}: {error}", USAGE) from None
    listener.settimeout(0.5)
    bound = listener.getsockname()[1]
    print(f"Forwarding from {args.address}:{bound} -> {remote}", flush=True)
    stop_reasons: list[str] = []
    try:
        while not stop_reasons:
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            threading.Thread(
                target=_forward, args=(client, path, connection, stop_reasons), daemon=True
            ).start()
    except KeyboardInterrupt:
        return INTERRUPTED
    finally:
        listener.close()
    raise CliError(stop_reasons[0], SERVER)


def _ports(spec: str) -> tuple[int, str]:
    """LOCAL:REMOTE, or REMOTE alone (the same local port, or any free one for a name); an
    empty or 0 LOCAL picks a free port. REMOTE is a declared port's number or name."""
    local_text, _, remote = spec.rpartition(":")
    if not REMOTE_PORT.match(remote):
        raise CliError(f"{spec}: REMOTE is a port number or a declared port's name", USAGE)
    if not local_text:
        local_text = remote if PORT_NUMBER.match(remote) and ":" not in spec else "0"
    if not PORT_NUMBER.match(local_text) or int(local_text) > 65535:
        raise CliError(f"{spec}: LOCAL is a port number from 0 to 65535", USAGE)
    return int(local_text), remote


def _forward(client: Client, path: str, connection: socket.socket, stop_reasons: list[str]) -> None:
    with connection:
        try:
            session = StreamClient.open(client, path)
        except CliError as error:
            print(f"lessor: {error}", file=sys.stderr)
            if getattr(error, "reason", "") in LEASE_GONE:
                stop_reasons.append(str(error))
            return
        threading.Thread(target=_send_local, args=(session, connection), daemon=True).start()
        try:
            while True:
                for _, payload in session.receive():
                    connection.sendall(payload)
        except Closed as closed:
            if closed.code not in (NORMAL, 1006):
                print(f"lessor: {closed.message}", file=sys.stderr)
            if closed.code in (LEASE_ENDED, ACCESS_REVOKED):
                stop_reasons.append(closed.message)
        except OSError:  # the local client went away
            session.end()


def _send_local(session: StreamClient, connection: socket.socket) -> None:
    try:
        while data := connection.recv(65536):
            session.send(STDIN, data)
    except OSError:
        pass
    session.end()
