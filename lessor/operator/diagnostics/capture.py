"""What a diagnostics bundle holds, read from the leased cluster and from lessor's own records.

Files: `cluster/version.json`; `cluster/namespaces.json`, `nodes.json`, `pods.json`,
`events.json` (every namespace; with a kubeconfig confined to one namespace, that namespace's
pods and events); `logs/<namespace>/<pod>/<container>.log`, the last `logLines` lines of each
started container of a pod on a node; `lessor/lease.json` (the lease: who, which cluster, its
phases with their times) and `lessor/events.json` (what the operator
recorded about it); `capture.json` last (bundle.py). Lists are read a page at a time; every read
is cut at what is left of the budget, and a read that fails is listed with its error and the
capture goes on. Names from the cluster become paths in the archive only if they are Kubernetes
names (no `..`, no `/`).
"""

from __future__ import annotations

import json
import re
from typing import Any

from lessor.operator.diagnostics.bundle import BundleWriter
from lessor.operator.diagnostics.cluster_reader import ClusterReader, ReadError
from lessor.protocol.json_object import Json

PAGE = 250
LOG_LIMIT = 2 * 1024 * 1024  # one container's log, at most
NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
# (file, cluster-wide path, the resource's plural where a namespace can be listed instead)
LISTS = (
    ("cluster/namespaces.json", "/api/v1/namespaces", None),
    ("cluster/nodes.json", "/api/v1/nodes", None),
    ("cluster/pods.json", "/api/v1/pods", "pods"),
    ("cluster/events.json", "/api/v1/events", "events"),
)
FORBIDDEN = 403


async def capture_cluster(reader: ClusterReader, writer: BundleWriter, log_lines: int) -> None:
    try:
        body, cut = await reader.get("/version", min(writer.left, 64 * 1024))
        writer.add("cluster/version.json", body, truncated=cut)
    except ReadError as error:
        writer.failed("cluster/version.json", str(error))
    listed: dict[str, list[Json]] = {}
    for name, path, plural in LISTS:
        confined = reader.namespace if plural and NAME.match(reader.namespace or "") else None
        fallback = f"/api/v1/namespaces/{confined}/{plural}" if confined else None
        listed[name] = await _list(reader, writer, name, path, fallback)
    if log_lines:
        await _logs(reader, writer, listed["cluster/pods.json"], log_lines)


async def _list(
    reader: ClusterReader, writer: BundleWriter, name: str, path: str, fallback: str | None
) -> list[Json]:
    """Every page of a list while the budget lasts; the items, also written to `name`. Refused
    cluster-wide, the list is read from `fallback` (the kubeconfig's namespace) if there is one."""
    items: list[Json] = []
    params: dict[str, str | int] = {"limit": PAGE}
    cut = False
    try:
        while True:
            body, cut = await reader.get(path, writer.left, params)
            if cut:
                break
            page = json.loads(body)
            if not isinstance(page, dict) or not isinstance(page.get("items"), list):
                raise ReadError(f"GET {path}: not a list")
            items += [item for item in page["items"] if isinstance(item, dict)]
            token = page.get("metadata", {}).get("continue") if page.get("metadata") else None
            if not token or not isinstance(token, str):
                break
            params = {"limit": PAGE, "continue": token}
    except ReadError as error:
        if error.status == FORBIDDEN and fallback and not items:
            return await _list(reader, writer, name, fallback, None)
        writer.failed(name, str(error))
        if not items:
            return []
    except ValueError as error:
        writer.failed(name, f"GET {path}: not JSON ({error})")
        if not items:
            return []
    writer.add_json(name, {"items": items}, truncated=cut)
    return items


def _started_containers(pod: Json) -> list[str]:
    statuses = pod.get("status", {}).get("initContainerStatuses", []) or []
    statuses += pod.get("status", {}).get("containerStatuses", []) or []
    started = []
    for status in statuses:
        if not isinstance(status, dict):
            continue
        state: dict[str, Any] = status.get("state") or {}
        if ("running" in state or "terminated" in state or status.get("restartCount")) and (
            NAME.match(str(status.get("name", "")))
        ):
            started.append(str(status["name"]))
    return started


async def _logs(
    reader: ClusterReader, writer: BundleWriter, pods: list[Json], log_lines: int
) -> None:
    for pod in pods:
        metadata = pod.get("metadata", {})
        namespace, pod_name = str(metadata.get("namespace", "")), str(metadata.get("name", ""))
        if not (NAME.match(namespace) and NAME.match(pod_name)) or not pod.get("spec", {}).get(
            "nodeName"
        ):
            continue
        for container in _started_containers(pod):
            name = f"logs/{namespace}/{pod_name}/{container}.log"
            if writer.left == 0:
                writer.failed(name, "left out: the bundle is full (maxBytes)")
                continue
            params: dict[str, str | int] = {
                "container": container,
                "tailLines": log_lines,
                "limitBytes": min(writer.left, LOG_LIMIT),
            }
            try:
                body, cut = await reader.get(
                    f"/api/v1/namespaces/{namespace}/pods/{pod_name}/log",
                    min(writer.left, LOG_LIMIT),
                    params,
                )
                writer.add(name, body, truncated=cut)
            except ReadError as error:
                writer.failed(name, str(error))


def lease_record(lease: Json) -> Json:
    """lessor's own record of the lease: who held it, which cluster, its phases and times."""
    metadata = lease.get("metadata", {})
    return {
        "name": metadata.get("name"),
        "namespace": metadata.get("namespace"),
        "uid": metadata.get("uid"),
        "createdAt": metadata.get("creationTimestamp"),
        "spec": lease.get("spec", {}),
        "status": {k: v for k, v in lease.get("status", {}).items() if k != "diagnostics"},
    }
