"""What a diagnostics bundle holds, read from the leased cluster and from lessor's own records.

Files: `cluster/version.json`; `cluster/<list>/page-0001.json`, `page-0002.json`, ... for the
lists of namespaces, nodes, pods and events, each page as the cluster answered it (every
namespace; with a kubeconfig confined to one namespace, that namespace's pods and events);
`logs/<namespace>/<pod>/<container>.log`, the last `logLines` lines of each started container of
a pod on a node; `lessor/lease.json` (the lease: who, which cluster, its phases with their times)
and `lessor/events.json` (what the operator recorded about it); `capture.json` last (bundle.py).

The cluster's answers are its tenant's, so the capture holds about one page at a time whatever
`maxBytes` is: a page is read up to PAGE_BYTES and filed at once, raw, never parsed whole; only
its head is decoded, for the next page's token, and of the pods' pages the few fields the log
step needs, one pod at a time, for at most LOG_PODS pods (list_page.py). A list stops after
MAX_PAGES pages, the logs after LOG_FILES files. A bound that cuts something is listed in
capture.json with why, and a read that fails with its error; the capture goes on either way.
Names from the cluster become paths in the archive only if they are Kubernetes names (no `..`,
no `/`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from lessor.operator.diagnostics import list_page
from lessor.operator.diagnostics.bundle import FULL, LEFT_OUT, BundleWriter
from lessor.operator.diagnostics.cluster_reader import ClusterReader, ReadError
from lessor.protocol.json_object import Json

MiB = 1024 * 1024
PAGE = 250  # items asked for per page
PAGE_BYTES = 8 * MiB
MAX_PAGES = 100  # of one list
LOG_PODS = 1000
LOG_FILES = 1000
VERSION_BYTES = 64 * 1024
LOG_LIMIT = 2 * MiB  # one container's log, at most
NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
FORBIDDEN = 403


@dataclass(frozen=True)
class Listing:
    directory: str
    path: str  # cluster-wide
    plural: str | None = None  # where the kubeconfig's namespace can be listed instead


LISTS = (
    Listing("cluster/namespaces", "/api/v1/namespaces"),
    Listing("cluster/nodes", "/api/v1/nodes"),
    Listing("cluster/pods", "/api/v1/pods", "pods"),
    Listing("cluster/events", "/api/v1/events", "events"),
)


@dataclass(frozen=True)
class Log:
    namespace: str
    pod: str
    container: str

    @property
    def name(self) -> str:
        return f"logs/{self.namespace}/{self.pod}/{self.container}.log"


@dataclass
class Logs:
    """The container logs to read, gathered from the pods' pages as they are read."""

    pods: int = 0
    wanted: list[Log] = field(default_factory=list)
    cut: str | None = None  # why some pods' logs are left out

    def gather(self, page: bytes, items: int) -> None:
        """The logs of the pods of `page` (its items start at `items`), within the bounds."""
        if self.cut:
            return
        try:
            for pod in list_page.items(page, items):
                if not self._take(pod):
                    return
        except list_page.TooLargeError:
            self.cut = (
                f"a pod larger than {_size(list_page.WINDOW)}: its logs and those of the"
                " pods after it are left out"
            )
        except list_page.PageError:
            return  # the page ends there (cut at its bound, or not a list): filed as it is

    def _take(self, pod: object) -> bool:
        """Take a pod's logs; False once a bound stops the gathering."""
        self.pods += 1
        if self.pods > LOG_PODS:
            self.cut = f"more than {LOG_PODS} pods: the logs of the rest are left out"
            return False
        metadata = _field(pod, "metadata")
        namespace, name = str(_field(metadata, "namespace")), str(_field(metadata, "name"))
        if not (
            NAME.match(namespace) and NAME.match(name) and _field(_field(pod, "spec"), "nodeName")
        ):
            return True
        for container in _started_containers(pod):
            if len(self.wanted) == LOG_FILES:
                self.cut = f"more than {LOG_FILES} logs: the rest are left out"
                return False
            self.wanted.append(Log(namespace, name, container))
        return True


def _field(value: object, key: str) -> object:
    """`value[key]` where `value` is an object that has it: the cluster's JSON may be any shape."""
    return value.get(key) if isinstance(value, dict) else None


def _started_containers(pod: object) -> list[str]:
    status = _field(pod, "status")
    statuses = [
        container
        for key in ("initContainerStatuses", "containerStatuses")
        if isinstance(found := _field(status, key), list)
        for container in found
    ]
    started = []
    for container in statuses:
        state = _field(container, "state")
        began = _field(state, "running") is not None or _field(state, "terminated") is not None
        name = _field(container, "name")
        if (
            (began or _field(container, "restartCount"))
            and isinstance(name, str)
            and NAME.match(name)
        ):
            started.append(name)
    return started


async def capture_cluster(reader: ClusterReader, writer: BundleWriter, log_lines: int) -> None:
    await _version(reader, writer)
    logs = Logs()
    for listing in LISTS:
        gather = logs if listing.plural == "pods" and log_lines else None
        await _list(
            reader, writer, listing, listing.path, gather, fallback=_confined(reader, listing)
        )
    if log_lines:
        await _logs(reader, writer, logs, log_lines)


def _confined(reader: ClusterReader, listing: Listing) -> str | None:
    """The list in the kubeconfig's namespace, when it names one and the list can be read so."""
    if listing.plural and NAME.match(reader.namespace or ""):
        return f"/api/v1/namespaces/{reader.namespace}/{listing.plural}"
    return None


async def _version(reader: ClusterReader, writer: BundleWriter) -> None:
    name = "cluster/version.json"
    limit = min(writer.left, VERSION_BYTES)
    try:
        body, cut = await reader.get("/version", limit)
    except ReadError as error:
        writer.failed(name, str(error))
        return
    writer.add_read(name, body, cut=_why(cut, limit, VERSION_BYTES, _size(VERSION_BYTES)))


async def _list(
    reader: ClusterReader,
    writer: BundleWriter,
    listing: Listing,
    path: str,
    logs: Logs | None,
    *,
    fallback: str | None,
) -> None:
    """Every page of a list, each filed as it comes, until the list ends or a bound stops it.
    Refused cluster-wide, the list is read from `fallback` (the kubeconfig's namespace) if there
    is one; the pods' pages give `logs` their pods."""
    params: dict[str, str | int] = {"limit": PAGE}
    for number in range(1, MAX_PAGES + 1):
        name = f"{listing.directory}/page-{number:04d}.json"
        if writer.left == 0:
            writer.left_out(name, f"{LEFT_OUT}, with the rest of the list")
            return
        limit = min(writer.left, PAGE_BYTES)
        try:
            body, cut = await reader.get(path, limit, params)
        except ReadError as error:
            if number == 1 and error.status == FORBIDDEN and fallback:
                await _list(reader, writer, listing, fallback, logs, fallback=None)
            else:
                writer.failed(name, str(error))
            return
        bound = f"the page bound ({_size(PAGE_BYTES)})"
        writer.add_read(name, body, cut=_why(cut, limit, PAGE_BYTES, bound))
        token = _next_page(writer, listing.directory, name, body, logs, cut=cut)
        if token is None:
            return
        params = {"limit": PAGE, "continue": token}
    writer.left_out(f"{listing.directory}/", f"more than {MAX_PAGES} pages: the rest is left out")


def _next_page(
    writer: BundleWriter, directory: str, name: str, page: bytes, logs: Logs | None, *, cut: bool
) -> str | None:
    """The continue token of a page just filed (None: the list ends with it); its pods go to
    `logs`."""
    try:
        head = list_page.read_head(page)
    except list_page.TooLargeError as error:
        writer.left_out(f"{directory}/", f"{name}: {error}; the rest of the list is left out")
        return None
    except list_page.PageError as error:
        if not cut:  # a cut page's end is recorded already
            writer.failed(f"{directory}/", f"{name} is not a list ({error}); the rest is not read")
        return None
    if logs is not None and head.items is not None:
        logs.gather(page, head.items)
    return head.continue_token


async def _logs(reader: ClusterReader, writer: BundleWriter, logs: Logs, log_lines: int) -> None:
    for log in logs.wanted:
        if writer.left == 0:
            writer.left_out(log.name, LEFT_OUT)
            continue
        limit = min(writer.left, LOG_LIMIT)
        params: dict[str, str | int] = {
            "container": log.container,
            "tailLines": log_lines,
            "limitBytes": limit,
        }
        try:
            body, cut = await reader.get(
                f"/api/v1/namespaces/{log.namespace}/pods/{log.pod}/log", limit, params
            )
        except ReadError as error:
            writer.failed(log.name, str(error))
            continue
        writer.add_read(log.name, body, cut=_why(cut, limit, LOG_LIMIT, _size(LOG_LIMIT)))
    if logs.cut:
        writer.left_out("logs/", logs.cut)


def _why(cut: bool, limit: int, bound: int, named: str) -> str | None:
    """Why a read of at most `limit` bytes was cut: at its own `bound`, or at the budget's end."""
    if not cut:
        return None
    return f"cut at {named}" if limit == bound else FULL


def _size(count: int) -> str:
    """A bound as capture.json and the docs name it: 8 MiB, 64 KiB."""
    for unit, size in (("MiB", MiB), ("KiB", 1024)):
        if count >= size and count % size == 0:
            return f"{count // size} {unit}"
    return f"{count} bytes"


def lease_record(lease: Json) -> Json:
    """lessor's own record of the lease: who held it, which cluster, its phases and times. Copied
    from the stored object as it is, raw, so the bundle shows what kube-apiserver held."""
    metadata = lease.get("metadata", {})
    return {
        "name": metadata.get("name"),
        "namespace": metadata.get("namespace"),
        "uid": metadata.get("uid"),
        "createdAt": metadata.get("creationTimestamp"),
        "spec": lease.get("spec", {}),
        "status": {k: v for k, v in lease.get("status", {}).items() if k != "diagnostics"},
    }
