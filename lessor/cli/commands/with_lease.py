"""`lessor with-lease POOL -- CMD ARGS...`: lease a cluster, run CMD with it, release it however
CMD ends. What a CI job otherwise writes itself (lease, export the kubeconfig, run, release in
an `always()` step, hope the lease outlives the tests), in one command:

- CMD runs with `KUBECONFIG` (the lease's kubeconfig, mode 0600) and `LESSOR_LEASE_ID` set, and
  its exit status is the command's. A lease that could not be had is the `lease` command's exit
  codes; CMD is then never run.
- SIGINT, SIGTERM and SIGHUP are passed on to CMD, which decides when to stop; the lease is
  released once it has. A second Ctrl-C stops waiting for it (it is killed). On a terminal the
  terminal already sends Ctrl-C to CMD, so it is not sent twice.
- Keepalive: while CMD runs, the lease is extended before it expires, by its own TTL each time,
  for as long as its policy allows (`maxExtensions`, `maxTtl`); then one warning says when it
  will expire, and CMD runs on.
- `--diagnostics-on-failure DIR`: when CMD fails, the lease's diagnostics bundle (captured by
  the operator as the lease is released, on pools that configure it) is saved into DIR.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import FrameType

from lessor.cli import context, kubeconfigs, late_options
from lessor.cli.answers import MalformedAnswerError
from lessor.cli.client import Client, server_id
from lessor.cli.commands import lease as leasing
from lessor.cli.commands.diagnostics import download
from lessor.cli.errors import INTERRUPTED, TIMEOUT, USAGE, ApiError, CliError
from lessor.cli.progress import Progress
from lessor.protocol.durations import format_duration, parse_duration
from lessor.protocol.phases import CLUSTER_LEASE
from lessor.protocol.responses import DiagnosticsBundle, Expiry, Lease, LeaseCreated, PoolRecord

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
DIAGNOSTICS_WAIT_SECONDS = 300.0  # for the release that captures the bundle


def run(args: argparse.Namespace) -> int:
    command = late_options.command_line(
        args,
        ("--ttl", "--name", "--metadata-json", "--wait-timeout", "--diagnostics-on-failure"),
        ("--no-keepalive", "--allow-unsafe-kubeconfig"),
        example="make e2e",
    )
    if shutil.which(command[0]) is None:  # said before a cluster is taken for nothing
        raise CliError(f"cannot run {command[0]}: no such command", USAGE)
    timeout = leasing.seconds("--wait-timeout", args.wait_timeout)
    leasing.seconds("--ttl", args.ttl)
    metadata = leasing.metadata_from(args.metadata_json)
    bundles = _bundle_directory(args.diagnostics_on_failure)
    client = context.client(args)
    pool = client.get_model(f"/v1/pools/{args.pool}", PoolRecord)
    if pool.resource_kind == "Sandbox":
        raise CliError(f"{args.pool} is a Sandbox pool: `lessor run` runs a command there", USAGE)
    request = argparse.Namespace(pool=args.pool, ttl=args.ttl, name=args.name, ensure=False)
    lease, _ = leasing.create(client, request, metadata)
    lease_id = server_id(lease.id)
    # The TTL granted (a created lease's; one read back after a lost answer says none).
    ttl = (lease.effective_ttl if isinstance(lease, LeaseCreated) else None) or args.ttl
    progress = Progress()
    # A CI runner cancels with SIGTERM or SIGHUP as well as SIGINT: from the moment the lease
    # exists until COMMAND runs (when they are passed on to it), any of them releases it.
    previous = {signum: signal.signal(signum, _interrupt) for signum in FORWARDED[1:]}
    try:
        try:
            progress.update(f"lease {lease_id}: {lease.phase}")
            bound, kubeconfig = leasing.wait_bound(client, lease_id, timeout, progress)
        except KeyboardInterrupt:
            progress.clear()
            raise leasing.give_up(client, lease_id, False, "interrupted", INTERRUPTED) from None
        except TimeoutError:
            progress.clear()
            why = f"lease {lease_id} was not {CLUSTER_LEASE.usable} within {args.wait_timeout}"
            raise leasing.give_up(client, lease_id, False, why, TIMEOUT) from None
        progress.clear()
        keepalive = Keepalive(client, lease_id, ttl)
        status = INTERRUPTED
        try:
            path = kubeconfigs.write(
                lease_id, kubeconfig, allow_unsafe=args.allow_unsafe_kubeconfig
            )
            if not args.no_keepalive and bound.expires_at:  # one that never expires needs none
                keepalive.start(bound.expires_at)
            env = {**os.environ, "KUBECONFIG": str(path), "LESSOR_LEASE_ID": lease_id}
            status = _run(command, env)
        except KeyboardInterrupt:  # before COMMAND started: it never runs
            pass
        finally:
            keepalive.stop()
            _release(client, lease_id)
        if status != 0 and bundles is not None:
            _save_diagnostics(client, lease_id, bundles, progress)
        return status
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _interrupt(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _run(command: list[str], env: dict[str, str]) -> int:
    """CMD's exit status (128 + N when signal N ended it), the signals passed on meanwhile. The
    handlers are in place before CMD starts: a signal in between reaches it once it exists."""
    child: subprocess.Popen[bytes] | None = None
    pending: list[int] = []
    interactive = sys.stdin.isatty()
    interrupts = 0

    def forward(signum: int, _frame: FrameType | None) -> None:
        nonlocal interrupts
        if signum == signal.SIGINT:
            interrupts += 1
            if interrupts > 1 and child is not None:  # a second Ctrl-C: stop waiting for CMD
                with contextlib.suppress(ProcessLookupError):
                    child.kill()
                return
            if interactive and child is not None:  # the terminal sent it to CMD as well
                return
        if child is None:
            pending.append(signum)
            return
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)

    previous = {signum: signal.signal(signum, forward) for signum in FORWARDED}
    try:
        try:
            child = subprocess.Popen(command, env=env)
        except OSError as error:
            raise CliError(f"cannot run {command[0]}: {error.strerror}", USAGE) from None
        for signum in pending:
            child.send_signal(signum)
        status = child.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if interrupts > 1:
        return INTERRUPTED
    return status if status >= 0 else 128 - status


def _release(client: Client, lease_id: str) -> None:
    """Release, with SIGTERM and SIGHUP held off meanwhile: a runner's second signal must not
    cut the release short and leave the cluster held until it expires."""
    held = {signum: signal.signal(signum, signal.SIG_IGN) for signum in FORWARDED[1:]}
    try:
        client.call("DELETE", f"/v1/leases/{lease_id}")
    except CliError as error:
        print(
            f"lessor: releasing lease {lease_id} failed ({error}): `lessor release {lease_id}`",
            file=sys.stderr,
        )
    else:
        print(f"lessor: released lease {lease_id}", file=sys.stderr)
    finally:
        for signum, handler in held.items():
            signal.signal(signum, handler)
    kubeconfigs.remove(lease_id)


def _bundle_directory(value: str | None) -> Path | None:
    """--diagnostics-on-failure DIR, checked before a lease is taken."""
    if value is None:
        return None
    directory = Path(value)
    if not directory.is_dir() or not os.access(directory, os.W_OK):
        raise CliError(f"--diagnostics-on-failure: {value} is not a directory it can write", USAGE)
    return directory


def _save_diagnostics(client: Client, lease_id: str, directory: Path, progress: Progress) -> None:
    """The bundle of a lease whose command failed, into DIRECTORY. The operator captures it
    while the lease is released, so it is there once the lease is: waited for (bounded), then
    downloaded. A bundle that cannot be had is one line; COMMAND's status stays the exit."""
    deadline = time.monotonic() + DIAGNOSTICS_WAIT_SECONDS
    try:
        while True:
            phase = client.get_model(f"/v1/leases/{lease_id}?waitSeconds=20", Lease).phase
            if phase in CLUSTER_LEASE.finished:
                break
            if time.monotonic() > deadline:
                raise CliError(f"lease {lease_id} was not released within 5m")
            progress.update(f"lease {lease_id}: {phase}, its diagnostics captured")
        progress.clear()
        bundle = client.get_model(f"/v1/leases/{lease_id}/diagnostics", DiagnosticsBundle)
        path = directory / f"lessor-diagnostics-{lease_id}.tar.gz"
        download(bundle.url, path)
    except CliError as error:
        progress.clear()
        print(f"lessor: no diagnostics for lease {lease_id}: {error}", file=sys.stderr)
        return
    print(f"lessor: wrote {path} ({bundle.size_bytes} bytes)", file=sys.stderr)


class Keepalive:
    """Extends the lease before it expires, by its TTL each time, until its policy allows no
    more; then says once when it will expire. A failed extension is tried again after a while:
    a network blip must not let the lease lapse under a running job."""

    def __init__(self, client: Client, lease_id: str, ttl: str | None):
        self.client = client
        self.lease_id = lease_id
        self.ttl = ttl
        self.expires = 0.0
        self.step = ""
        self.extensions = 0
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="keepalive")

    def start(self, expires_at: str) -> None:
        """Keep the lease that expires at `expires_at` alive, by its TTL (or, without one, by
        the time it has left now) each time."""
        self.expires = _moment(expires_at)
        remaining = max(60.0, self.expires - time.time())
        self.step = self.ttl or format_duration(datetime.timedelta(seconds=int(remaining)))
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _margin(self) -> float:
        """How long before the expiry to extend: a third of the TTL, 20 s to 5 min."""
        return min(300.0, max(20.0, parse_duration(self.step).total_seconds() / 3))

    def _loop(self) -> None:
        while not self._stopped.wait(max(0.0, self.expires - self._margin() - time.time())):
            try:
                answer = self.client.call_model(
                    "PATCH", f"/v1/leases/{self.lease_id}", Expiry, {"extend_ttl": self.step}
                )
            except ApiError as error:
                if error.status == 409:  # the policy's budget or ceiling: nothing more to do
                    self._warn(f"cannot be extended further ({error.reason or error})")
                    return
                self._stopped.wait(10)
                continue
            except MalformedAnswerError as error:
                # It was extended, to a time that cannot be read: asking again would only spend
                # the policy's extensions.
                self._warn(f"is no longer kept alive ({error})")
                return
            except CliError:
                self._stopped.wait(10)
                continue
            later = _moment(answer.expires_at)
            self.extensions += 1
            if later <= self.expires:
                self._warn("reached the longest its policy allows")
                return
            self.expires = later

    def _warn(self, why: str) -> None:
        left = max(0, int(self.expires - time.time()))
        when = datetime.datetime.fromtimestamp(self.expires, datetime.UTC).strftime("%H:%M:%SZ")
        print(
            f"lessor: warning: lease {self.lease_id} {why}; it expires at {when} "
            f"(in {format_duration(datetime.timedelta(seconds=left))})",
            file=sys.stderr,
            flush=True,
        )


def _moment(text: str) -> float:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
