"""One attach or port-forward session: a client WebSocket bridged to a pod stream.

Two workers copy frames, one each way, while the session's own thread enforces the limits: no
data either way for `idle` seconds, a session older than `longest`, and every `recheck` seconds
the lease and the caller's grant (`check`, which revokes the session when the lease leaves Ready
or expires, or the AccessPolicy no longer grants its pool); and a
stopping worker closes its sessions at once (lessor.apiserver.http.lifecycle). Under
gunicorn's gevent worker the threads are greenlets. Whatever ends the session, the workers are
joined before the close handshake, so no two of them ever read one socket, and the client is
told why with an error frame and the close frame's code and reason (lessor.protocol.stream_frames).
Pings do not count as activity: a client that only keeps the connection alive is idle.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from lessor.apiserver.http import lifecycle
from lessor.apiserver.sandboxes.streams import PodStream, StreamEnded
from lessor.apiserver.sandboxes.websocket import PeerClosed, WebSocket
from lessor.protocol.stream_frames import (
    BACKEND_ERROR,
    CLOSE_REASONS,
    DURATION_LIMIT,
    ERROR,
    GOING_AWAY,
    IDLE_TIMEOUT,
    NORMAL,
    FrameError,
    client_frame,
    encode,
    error_payload,
)

log = logging.getLogger(__name__)
POLL = 0.5  # seconds each worker waits for data before it looks whether the session ended


@dataclass(frozen=True)
class Limits:
    idle: float
    longest: float
    recheck: float = 5.0


@dataclass(frozen=True)
class Outcome:
    code: int
    detail: str
    by_client: bool = False

    @property
    def reason(self) -> str:
        return "closed" if self.by_client else CLOSE_REASONS.get(self.code, "ended")


class StreamSession:
    def __init__(
        self,
        websocket: WebSocket,
        pod: PodStream,
        limits: Limits,
        check: Callable[[], None],
    ) -> None:
        self.websocket = websocket
        self.pod = pod
        self.limits = limits
        self.check = check
        self.finished = threading.Event()
        self.lock = threading.Lock()
        self.outcome: Outcome | None = None
        self.last_data = time.monotonic()
        self.bytes_in = self.bytes_out = 0

    def finish(self, outcome: Outcome) -> None:
        with self.lock:
            if self.outcome is None:
                self.outcome = outcome
        self.finished.set()

    def run(self) -> Outcome:
        workers = [
            threading.Thread(target=self._guarded, args=(self._outbound,), daemon=True),
            threading.Thread(target=self._guarded, args=(self._inbound,), daemon=True),
        ]
        for worker in workers:
            worker.start()
        self._watch()
        return self._end(workers)

    def _watch(self) -> None:
        started = time.monotonic()
        next_check = started + self.limits.recheck
        while not self.finished.wait(POLL):
            now = time.monotonic()
            if lifecycle.stopping():
                self.finish(Outcome(GOING_AWAY, "the API server is shutting down; reconnect"))
            elif now - self.last_data >= self.limits.idle:
                self.finish(Outcome(IDLE_TIMEOUT, f"no data for {self.limits.idle:g}s"))
            elif now - started >= self.limits.longest:
                self.finish(
                    Outcome(DURATION_LIMIT, f"sessions last at most {self.limits.longest:g}s")
                )
            elif now >= next_check:
                next_check = now + self.limits.recheck
                self._recheck()

    def _end(self, workers: list[threading.Thread]) -> Outcome:
        for worker in workers:
            worker.join(POLL * 4)
        outcome = self.outcome or Outcome(BACKEND_ERROR, "the session ended unexpectedly")
        self._close(outcome)
        return outcome

    def _recheck(self) -> None:
        try:
            self.check()
        except StreamEnded as ended:
            self.finish(Outcome(ended.code, ended.detail))
        except Exception:  # a transient API failure does not end a working session
            log.warning("rechecking a stream's lease failed; the next check retries", exc_info=True)

    def _close(self, outcome: Outcome) -> None:
        last = None
        if not outcome.by_client and outcome.code != NORMAL:
            last = encode(ERROR, error_payload(outcome.reason, outcome.detail))
        self.websocket.close(outcome.code, outcome.reason, last)
        try:
            self.pod.close()
        except Exception:  # the pod stream may already be gone
            log.debug("closing a pod stream failed", exc_info=True)

    def _guarded(self, work: Callable[[], None]) -> None:
        try:
            work()
        except StreamEnded as ended:
            self.finish(Outcome(ended.code, ended.detail))
        except PeerClosed:
            self.finish(Outcome(NORMAL, "the client closed the session", by_client=True))
        except FrameError as error:
            self.finish(Outcome(error.code, str(error)))
        except Exception:
            log.exception("a stream session failed")
            self.finish(Outcome(BACKEND_ERROR, "the sandbox's stream failed"))

    def _outbound(self) -> None:
        while not self.finished.is_set():
            for channel, payload in self.pod.read(POLL):
                self.websocket.send(encode(channel, payload))
                self.bytes_out += len(payload)
                self.last_data = time.monotonic()

    def _inbound(self) -> None:
        while not self.finished.is_set():
            for message in self.websocket.receive(POLL):
                channel, payload = client_frame(message)
                if channel not in self.pod.accepts:
                    raise FrameError(f"channel {channel} is not used by this kind of session")
                self.pod.write(channel, payload)
                self.bytes_in += len(payload)
                self.last_data = time.monotonic()
