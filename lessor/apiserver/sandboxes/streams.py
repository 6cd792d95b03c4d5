"""Attach and port-forward sessions of a Sandbox lease (spec 4.4): who may open one, to which
pod stream, and when an open one must end.

A session is authorized when it opens, like any request: the caller's own Ready lease
(another identity's, or one outside the caller's scope, is 404), and for port-forward a port the
lease's SandboxPool declares (403 `not_declared` otherwise). The pod stream is the Kubernetes
attach or portforward subresource of the lease's pod, checked against the uid the operator
recorded, so a pod replaced under the same name is never reached. While open, the session is
revoked as soon as the lease is seen leaving Ready or passing its expiry, or the caller's
AccessPolicy is seen no longer granting the lease's pool (`check`): an administrator who
withdraws a grant ends its open sessions too, within a recheck, not only new requests. The
credential itself is checked once, when the session opens, as kube-apiserver does for
`kubectl exec`: a token that expires or is removed later does not end an open session.

Every stream gets an ApiClient of its own: the kubernetes client's stream helpers swap the
transport of the ApiClient they are given while they connect.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Protocol

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import portforward, stream

from lessor.apiserver.auth.authenticator import Authenticator, Principal
from lessor.apiserver.auth.errors import AuthenticationError
from lessor.apiserver.http.bodies import AttachQuery, ForwardQuery, parse_query
from lessor.apiserver.http.errors import (
    BadRequestError,
    ForbiddenError,
    HttpError,
    UnavailableError,
)
from lessor.apiserver.policy.evaluation import IdentityError, render_identity, sandbox_grant
from lessor.apiserver.policy.store import PolicyStore
from lessor.apiserver.sandboxes.sandbox_leases import (
    SandboxLeaseService,
    live_pod,
    placed_pod,
)
from lessor.apiserver.state.kube import Kube
from lessor.protocol.json_object import Json
from lessor.protocol.stream_frames import (
    ACCESS_REVOKED,
    BACKEND_ERROR,
    LEASE_ENDED,
    NORMAL,
    RESIZE,
    STDERR,
    STDIN,
    STDOUT,
    Resize,
)
from lessor.protocol.timestamps import utcnow
from lessor.resources.sandbox import SandboxLease, SandboxLeaseStatus

log = logging.getLogger(__name__)
CONNECT_TIMEOUT = 15


class StreamEnded(Exception):  # noqa: N818 - an ending, which may be a normal one
    """The pod's side of the session ended; `code` is the close code to pass on."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


class PodStream(Protocol):
    """One pod stream, as the session bridge drives it."""

    accepts: frozenset[int]  # the channels a client may send on

    def read(self, timeout: float) -> list[tuple[int, bytes]]:
        """The frames for the client that arrive within `timeout`; StreamEnded at the end."""

    def write(self, channel: int, payload: bytes) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class StreamTarget:
    kind: str  # "attach" or "port-forward"
    lease: str
    lease_uid: str
    pool: str
    pod: str
    namespace: str
    container: str | None = None
    tty: bool = False
    stdin: bool = True
    port: int | None = None


class AttachStream:
    """The pod's attach stream (kubernetes.stream, binary channels). Stdin sent to a container
    that does not read it (`stdin: false` in the pool's template) is discarded, as kubectl
    attach without -i would never send it."""

    accepts = frozenset({STDIN, RESIZE})

    def __init__(self, connection: Any, stdin: bool) -> None:
        self.connection = connection
        self.stdin = stdin
        self.ended = False

    def read(self, timeout: float) -> list[tuple[int, bytes]]:
        if self.ended:
            raise StreamEnded(NORMAL, "the sandbox's process closed the stream")
        self.connection.update(timeout=timeout)
        frames = [
            (channel, self.connection.read_channel(channel))
            for channel in (STDOUT, STDERR)
            if self.connection.peek_channel(channel)
        ]
        status = self.connection.read_channel(3) if self.connection.peek_channel(3) else b""
        if status:
            failure = _status_failure(status)
            if failure:
                raise StreamEnded(BACKEND_ERROR, failure)
            self.ended = True
        if not self.connection.is_open():
            self.ended = True
        return frames

    def write(self, channel: int, payload: bytes) -> None:
        if channel == STDIN and not self.stdin:
            return
        if channel == RESIZE:
            size = Resize.model_validate_json(payload)
            payload = json.dumps({"Width": size.width, "Height": size.height}).encode()
        self.connection.write_channel(channel, payload)

    def close(self) -> None:
        self.connection.close()


def _status_failure(raw: bytes) -> str | None:
    """The message of a failed v1 Status from the error channel; None for Success."""
    try:
        status = json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")[:200]
    if not isinstance(status, dict) or status.get("status") == "Success":
        return None
    return str(status.get("message") or "the attach stream failed")[:200]


class ForwardStream:
    """One connection to a pod port (kubernetes.stream.portforward, a local socket pair)."""

    accepts = frozenset({STDIN})

    def __init__(self, forward: Any, port: int) -> None:
        self.forward = forward
        self.port = port
        self.socket = forward.socket(port)
        # Reads wait with a timeout; a second handle of the same socket carries it, so that
        # writes (by the other worker) are never cut short by it.
        self.reader = self.socket.dup()

    def read(self, timeout: float) -> list[tuple[int, bytes]]:
        self.reader.settimeout(timeout)
        try:
            data: bytes = self.reader.recv(65536)
        except TimeoutError:
            return []
        if data:
            return [(STDOUT, data)]
        error = self.forward.error(self.port)
        if error:
            # The kubelet's message names internal addresses; the caller gets the gist.
            log.info("port-forward to port %s ended with an error: %s", self.port, error)
            raise StreamEnded(BACKEND_ERROR, f"the connection to port {self.port} failed")
        raise StreamEnded(NORMAL, f"the connection to port {self.port} closed")

    def write(self, channel: int, payload: bytes) -> None:
        self.socket.sendall(payload)

    def close(self) -> None:
        self.reader.close()
        self.forward.close()


class SandboxStreamService:
    def __init__(
        self,
        kube: Kube,
        leases: SandboxLeaseService,
        policies: PolicyStore,
        authenticator: Authenticator,
    ) -> None:
        self.kube = kube
        self.leases = leases
        self.policies = policies
        self.authenticator = authenticator

    def target(self, principal: Principal, lease_name: str, kind: str, query: str) -> StreamTarget:
        lease = self.leases.owned(principal, lease_name)
        placed = placed_pod(lease)
        pod = live_pod(self.kube, placed)
        common = {
            "lease": lease.metadata.name or "",  # `lease_name` may be its alias
            "lease_uid": lease.metadata.uid or "",
            "pool": lease.spec.pool,
            "pod": placed.name,
            "namespace": pod["metadata"]["namespace"],
        }
        if kind == "attach":
            params = parse_query(AttachQuery, query)
            container = _container(pod, self.leases.offered(common["pool"]), params.container)
            return StreamTarget(
                kind,
                container=container["name"],
                tty=params.tty and bool(container.get("tty")),
                stdin=bool(container.get("stdin")),
                **common,
            )
        port = self._declared_port(common["pool"], parse_query(ForwardQuery, query).port)
        return StreamTarget(kind, port=port, **common)

    def _declared_port(self, pool_name: str, wanted: str) -> int:
        try:
            declared = self.leases.pool(pool_name).spec.ports
        except HttpError:  # the pool is gone: it declares nothing any more
            declared = []
        for port in declared:
            if wanted in (port.name, str(port.port)):
                return port.port
        names = ", ".join(f"{p.name} ({p.port})" for p in declared) or "none"
        raise ForbiddenError(
            f"port {wanted} is not declared by SandboxPool {pool_name}; declared: {names}",
            reason="not_declared",
        )

    def open(self, target: StreamTarget) -> PodStream:
        """The pod stream, or 503 `backend_error` when it cannot be opened."""
        core = client.CoreV1Api(client.ApiClient(self.kube.api_client.configuration))
        try:
            if target.kind == "attach":
                connection = stream(
                    core.connect_get_namespaced_pod_attach,
                    target.pod,
                    target.namespace,
                    container=target.container,
                    stdin=target.stdin,
                    stdout=True,
                    stderr=not target.tty,
                    tty=target.tty,
                    _preload_content=False,
                    _request_timeout=CONNECT_TIMEOUT,
                    binary=True,
                )
                return AttachStream(connection, target.stdin)
            forward = portforward(
                core.connect_get_namespaced_pod_portforward,
                target.pod,
                target.namespace,
                ports=str(target.port),
            )
            return ForwardStream(forward, target.port or 0)
        except ApiException as error:
            log.warning("opening the %s stream of %s failed: %s", target.kind, target.pod, error)
            raise UnavailableError(
                f"the sandbox's {target.kind} stream could not be opened"
            ) from None

    def check(self, target: StreamTarget, principal: Principal) -> None:
        """End an open session that must not go on (StreamEnded with the close code): its lease
        left Ready, was replaced or reached its expiry, the caller's credential was revoked or
        expired, or the caller lost the grant."""
        try:
            self.authenticator.recheck(principal)
        except AuthenticationError as error:
            log.info("an open %s session's credential ended: %s", target.kind, error.cause)
            raise StreamEnded(ACCESS_REVOKED, "your credential was revoked or expired") from None
        found = self.kube.find_model(SandboxLease, target.lease)
        if found is None or found.metadata.uid != target.lease_uid:
            raise StreamEnded(LEASE_ENDED, "the lease ended")
        status = found.status or SandboxLeaseStatus()
        phase = status.phase or "Pending"
        if phase != SandboxLease.phases.usable:
            raise StreamEnded(LEASE_ENDED, f"the lease is {phase}")
        if status.expires_at is not None and status.expires_at <= utcnow():
            raise StreamEnded(LEASE_ENDED, "the lease reached its expiry")
        if not self._still_granted(principal, target.pool):
            raise StreamEnded(
                ACCESS_REVOKED, f"your AccessPolicy no longer grants SandboxPool {target.pool}"
            )

    def _still_granted(self, principal: Principal, pool: str) -> bool:
        """The grant the session opened with (verb `lease` on the pool, under the same
        identity), checked against the AccessPolicy the caller authenticated under as it is now:
        deleting it, narrowing its pools or changing its identity mapping all revoke."""
        current = self.policies.named(principal.policy.name)
        if current is None:
            return False
        try:
            same_identity = render_identity(current.spec.identity, principal.claims)
        except IdentityError:
            return False
        return (
            same_identity == principal.identity
            and sandbox_grant(current.spec, principal.claims, pool, "lease") is not None
        )


def _container(pod: Json, offered: list[str], name: str | None) -> Json:
    """The container to attach to: one the pool's template offers (see
    SandboxPoolSpec.containers), by default the pod's default container or the first offered."""
    if name is None:
        default = (
            pod["metadata"].get("annotations", {}).get("kubectl.kubernetes.io/default-container")
        )
        name = default if default in offered else next(iter(offered), "")
    for container in pod["spec"]["containers"]:  # a Pod: JSON, as every kind not lessor's
        if container["name"] == name and name in offered:
            return dict(container)
    raise BadRequestError(f"the sandbox has no container {name or '(none offered)'}")
