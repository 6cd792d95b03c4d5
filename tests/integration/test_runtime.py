"""The controller runtime against the real API server: informers, a real 410, real conflicts,
leader election between two electors, and Events."""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from lessor.controlplane.kubectl import Cluster
from lessor.operator.core.writes import patch_fenced
from lessor.operator.runtime.client import ApiError, ConflictError, KubeClient, ResourceType
from lessor.operator.runtime.controller import Controller, Result
from lessor.operator.runtime.events import EventRecorder
from lessor.operator.runtime.informer import Informer
from lessor.operator.runtime.leaderelection import COORDINATION_LEASES, LeaderElector
from lessor.operator.runtime.store import Handler
from lessor.protocol.json_object import Json
from tests.integration.operator_harness import wait_for
from tests.integration.service_accounts import write_token_kubeconfig

pytestmark = pytest.mark.integration
CONFIGMAPS = ResourceType("", "v1", "configmaps", "ConfigMap")


@pytest.fixture
def namespace(control_plane: Cluster) -> str:
    name = f"rt-{uuid.uuid4().hex[:8]}"
    control_plane.kubectl("create", "namespace", name)
    return name


SELECTOR = "lessor-test=runtime"  # leaves out kube-root-ca.crt, which every namespace has


def configmap(name: str, **labels: str) -> dict[str, Any]:
    labels["lessor-test"] = "runtime"
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}}


async def until(probe: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not probe():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("timed out")
        await asyncio.sleep(0.05)


def run(control_plane: Cluster, scenario: Callable[[KubeClient], Awaitable[None]]) -> None:
    async def main() -> None:
        client = await KubeClient.connect(str(control_plane.kubeconfig))
        await asyncio.wait_for(scenario(client), timeout=120)

    asyncio.run(main())


def test_informer_lists_then_watches_with_indexes(control_plane: Cluster, namespace: str) -> None:
    async def scenario(client: KubeClient) -> None:
        path = CONFIGMAPS.path(namespace)
        for n in range(7):
            await client.create(path, configmap(f"pre-{n}", team="a" if n % 2 else "b"))
        informer = Informer(
            client,
            CONFIGMAPS,
            namespace=namespace,
            label_selector=SELECTOR,
            indexers={"team": lambda o: [o["metadata"].get("labels", {}).get("team", "")]},
        )
        informer.reflector.page_size = 3  # the list really is paginated
        seen: list[str] = []
        informer.store.add_handler(
            Handler(
                on_add=lambda o: seen.append(f"add {o['metadata']['name']}"),
                on_update=lambda _o, n: seen.append(f"update {n['metadata']['name']}"),
                on_delete=lambda o: seen.append(f"delete {o['metadata']['name']}"),
            )
        )
        informer.start()
        await informer.wait_synced()
        assert len(informer.store.list()) == 7
        assert len(informer.store.by_index("team", "a")) == 3
        await client.create(path, configmap("live", team="a"))
        await client.merge_patch(CONFIGMAPS.path(namespace, "live"), {"data": {"k": "v"}})
        await client.delete(CONFIGMAPS.path(namespace, "pre-0"))
        await until(lambda: "delete pre-0" in seen and "update live" in seen)
        assert informer.store.get(f"{namespace}/live")["data"] == {"k": "v"}  # type: ignore[index]
        assert len(informer.store.by_index("team", "a")) == 4
        await informer.stop()

    run(control_plane, scenario)


def test_controller_retries_failures_and_requeues_real_conflicts(
    control_plane: Cluster, namespace: str
) -> None:
    async def scenario(client: KubeClient) -> None:
        informer = Informer(client, CONFIGMAPS, namespace=namespace, label_selector=SELECTOR)
        attempts: dict[str, int] = {}

        async def reconcile(key: str) -> Result:
            attempts[key] = attempts.get(key, 0) + 1
            obj = informer.store.get(key)
            assert obj is not None
            if key.endswith("/flaky") and attempts[key] == 1:
                raise RuntimeError("a transient failure")
            if key.endswith("/raced") and attempts[key] == 1:
                stale = dict(obj, metadata={**obj["metadata"], "resourceVersion": "1"})
                await client.replace(CONFIGMAPS.path(namespace, "raced"), stale)
            return Result()

        controller = Controller("test", reconcile, [informer], workers=2)
        informer.store.add_handler(
            Handler(on_add=lambda o: controller.enqueue(f"{namespace}/{o['metadata']['name']}"))
        )
        for name in ("flaky", "raced", "plain"):
            await client.create(CONFIGMAPS.path(namespace), configmap(name))
        informer.start()
        task = asyncio.create_task(controller.run())
        await until(
            lambda: (
                attempts.get(f"{namespace}/flaky") == 2 and attempts.get(f"{namespace}/raced") == 2
            )
        )
        await until(lambda: controller.queue.idle)  # nothing more is due, however slow
        assert attempts[f"{namespace}/plain"] == 1, "a success is not retried"
        assert attempts[f"{namespace}/raced"] == 2, "a conflict is retried once it succeeds"
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await informer.stop()
        with pytest.raises(ConflictError):
            obj = await client.get(CONFIGMAPS.path(namespace, "plain"))
            obj["metadata"]["resourceVersion"] = "1"
            await client.replace(CONFIGMAPS.path(namespace, "plain"), obj)

    run(control_plane, scenario)


class DataOf:
    """A source that reads each ConfigMap as its data, as a typed cache reads a model."""

    def __init__(self, informer: Informer) -> None:
        self.informer = informer

    def get(self, key: str) -> dict[str, str] | None:
        obj = self.informer.store.get(key)
        return None if obj is None else dict(obj.get("data") or {})


def test_a_controller_for_a_source_hands_each_reconcile_its_object_then_none(
    control_plane: Cluster, namespace: str
) -> None:
    """`for_`: changes of the source's objects enqueue their keys, and the reconcile is handed
    the object as the source reads it, then None once it is deleted (controller-runtime's
    typed reconciler, where a Go reconciler gets NotFound)."""

    async def scenario(client: KubeClient) -> None:
        informer = Informer(client, CONFIGMAPS, namespace=namespace, label_selector=SELECTOR)
        seen: list[tuple[str, dict[str, str] | None]] = []

        async def reconcile(key: str, data: dict[str, str] | None) -> Result:
            seen.append((key, data))
            return Result()

        controller = Controller("typed").for_(DataOf(informer), reconcile)
        informer.start()
        task = asyncio.create_task(controller.run())
        key = f"{namespace}/typed"
        await client.create(CONFIGMAPS.path(namespace), {**configmap("typed"), "data": {"k": "v"}})
        await until(lambda: (key, {"k": "v"}) in seen)
        await client.delete(CONFIGMAPS.path(namespace, "typed"))
        await until(lambda: seen[-1] == (key, None))
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await informer.stop()

    run(control_plane, scenario)


def test_a_lost_fence_is_a_conflict_and_a_wrong_patch_is_not(
    control_plane: Cluster, namespace: str
) -> None:
    """A fenced patch computed from an older version fails as a ConflictError, which the
    controller requeues quietly like a 409, not as an error; a patch that cannot apply to the
    current version keeps its own error."""

    async def scenario(client: KubeClient) -> None:
        stale = await client.create(CONFIGMAPS.path(namespace), configmap("fenced"))
        await client.merge_patch(CONFIGMAPS.path(namespace, "fenced"), {"data": {"k": "v"}})
        with pytest.raises(ConflictError):
            await patch_fenced(
                client, CONFIGMAPS, stale, [{"op": "add", "path": "/data/x", "value": "y"}]
            )
        fresh = await client.get(CONFIGMAPS.path(namespace, "fenced"))
        with pytest.raises(ApiError) as wrong:
            await patch_fenced(client, CONFIGMAPS, fresh, [{"op": "remove", "path": "/data/none"}])
        assert wrong.value.status == 422 and not isinstance(wrong.value, ConflictError)
        updated = await patch_fenced(
            client, CONFIGMAPS, fresh, [{"op": "add", "path": "/data/x", "value": "y"}]
        )
        assert updated["data"] == {"k": "v", "x": "y"}

    run(control_plane, scenario)


class CountingClient(KubeClient):
    """The real client, counting its reads: how a test knows a candidate really tried."""

    reads = 0

    async def get(self, path: str) -> Json:
        self.reads += 1
        return await super().get(path)


def test_leader_election_one_leader_and_a_graceful_handover(
    control_plane: Cluster, namespace: str
) -> None:
    """While a leader renews, another candidate tries again and again and never leads; when the
    leader stops as the manager stops it on SIGTERM (its run cancelled, then the lease
    released), the candidate leads at once. The lease lasts 60 s, so "at once" and "after the
    lease ran out" are told apart by the 40 s ceiling however slow the machine is."""

    async def scenario(client: KubeClient) -> None:
        leaders: dict[str, float] = {}

        def elector(identity: str, on: KubeClient) -> tuple[LeaderElector, asyncio.Task[None]]:
            candidate = LeaderElector(
                on, namespace, "election", identity=identity,
                lease_duration=60.0, renew_deadline=40.0, retry_period=0.5,
            )  # fmt: skip
            return candidate, asyncio.create_task(candidate.run(leading(leaders, identity)))

        a, task_a = elector("a", client)
        await until(lambda: "a" in leaders)
        watcher = CountingClient(client.api)
        _, task_b = elector("b", watcher)
        await until(lambda: watcher.reads >= 5, timeout=60)
        assert "b" not in leaders and a.is_leader, "exactly one leader"

        task_a.cancel()  # as the manager stops: the leader's work first, then its lease
        await asyncio.gather(task_a, return_exceptions=True)
        await a.release()
        await until(lambda: "b" in leaders, timeout=40)
        task_b.cancel()
        await asyncio.gather(task_b, return_exceptions=True)

    run(control_plane, scenario)


def test_leader_election_takeover_waits_out_the_lease_of_a_silent_leader(
    control_plane: Cluster, namespace: str
) -> None:
    """A leader that stops renewing without releasing (hung, or SIGKILLed) is succeeded, and
    never before its lease ran out since its last renewal: measured against the renewTime the
    lease itself records, so the verdict holds however slow the machine is."""

    async def scenario(client: KubeClient) -> None:
        leaders: dict[str, float] = {}

        def elector(identity: str) -> tuple[LeaderElector, asyncio.Task[None]]:
            candidate = LeaderElector(
                client, namespace, "silent", identity=identity,
                lease_duration=3.0, renew_deadline=2.0, retry_period=0.5,
            )  # fmt: skip
            return candidate, asyncio.create_task(candidate.run(leading(leaders, identity)))

        _, task_a = elector("a")
        await until(lambda: "a" in leaders)
        _, task_b = elector("b")
        task_a.cancel()  # stops renewing; no release
        await asyncio.gather(task_a, return_exceptions=True)
        lease = await client.get(COORDINATION_LEASES.path(namespace, "silent"))
        last_renewal = datetime.datetime.fromisoformat(lease["spec"]["renewTime"]).timestamp()
        await until(lambda: "b" in leaders, timeout=60)
        if lease["spec"]["holderIdentity"] == "a":
            assert leaders["b"] >= last_renewal + 3.0, "b led before a's lease ran out"
        task_b.cancel()
        await asyncio.gather(task_b, return_exceptions=True)

    run(control_plane, scenario)


def leading(leaders: dict[str, float], name: str) -> Callable[[], asyncio.Task[None]]:
    """The work of a leader: it notes when it started leading, then waits to be cancelled."""

    def start() -> asyncio.Task[None]:
        leaders[name] = time.time()
        return asyncio.create_task(asyncio.sleep(3600))

    return start


def test_events_are_recorded_and_repeats_folded(control_plane: Cluster, namespace: str) -> None:
    async def scenario(client: KubeClient) -> None:
        obj = await client.create(CONFIGMAPS.path(namespace), configmap("noted"))
        obj.update(apiVersion="v1", kind="ConfigMap")
        recorder = EventRecorder(client, "test-instance")
        await recorder.record(obj, "Normal", "Bound", "bound to somewhere")
        await recorder.record(obj, "Normal", "Bound", "bound to somewhere")
        await recorder.record(obj, "Warning", "Quarantined", "evidence remains")
        await recorder.drain()  # written in the background

    run(control_plane, scenario)
    shown = control_plane.kubectl(
        "get", "events", "-n", namespace, "--field-selector=involvedObject.name=noted", "-o", "json"
    )
    events = json.loads(shown.stdout)["items"]
    assert sorted(e["reason"] for e in events) == ["Bound", "Quarantined"]
    bound = next(e for e in events if e["reason"] == "Bound")
    assert bound.get("series", {}).get("count") == 2 or bound.get("count") == 2


def test_a_revoked_token_is_replaced_by_the_kubeconfigs_new_one_without_a_restart(
    control_plane: Cluster, namespace: str, tmp_path: Path
) -> None:
    """A credential that stops working (a rotated token, an expired exec credential) is read
    again from its source on the first 401 and the request sent once more; the operator used to
    answer every request with that 401 until it was restarted."""
    control_plane.kubectl("create", "serviceaccount", "rotating", "-n", namespace)

    def token(secret: str) -> str:
        control_plane.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
            "metadata": {"name": secret,
                         "annotations": {"kubernetes.io/service-account.name": "rotating"}},
        }))  # fmt: skip
        issued = wait_for(f"the token of {secret}", lambda: control_plane.kubectl(
            "get", "secret", secret, "-n", namespace, "-o", "jsonpath={.data.token}"
        ).stdout)  # fmt: skip
        return base64.b64decode(issued).decode()

    first, second = token("first"), token("second")
    rotating = write_token_kubeconfig(control_plane, tmp_path / "rotating", "rotating", first)
    revoked = write_token_kubeconfig(control_plane, tmp_path / "revoked", "rotating", first)

    async def scenario() -> None:
        client = await KubeClient.connect(str(rotating))
        stale = await KubeClient.connect(str(revoked))
        try:
            assert "resources" in await client.get("/api/v1")
            write_token_kubeconfig(control_plane, rotating, "rotating", second)
            control_plane.kubectl("delete", "secret", "first", "-n", namespace)

            async def rejected() -> bool:
                try:
                    await stale.get("/api/v1")
                except ApiError as error:
                    assert error.status == 401, error
                    return True
                await asyncio.sleep(0.2)
                return False

            for _ in range(150):
                if await rejected():
                    break
            else:
                raise AssertionError("the deleted token was never rejected")
            assert "resources" in await client.get("/api/v1")
        finally:
            await client.close()
            await stale.close()

    asyncio.run(asyncio.wait_for(scenario(), timeout=120))
