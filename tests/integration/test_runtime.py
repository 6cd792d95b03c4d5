"""The controller runtime against the real API server: informers, a real 410, real conflicts,
leader election between two electors, and Events."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from lessor.controlplane.kubectl import Cluster
from lessor.operator.runtime.client import ConflictError, KubeClient, ResourceType
from lessor.operator.runtime.controller import Controller, Result
from lessor.operator.runtime.events import EventRecorder
from lessor.operator.runtime.informer import Informer
from lessor.operator.runtime.leaderelection import LeaderElector
from lessor.operator.runtime.store import Handler

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
        await asyncio.sleep(0.5)
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


def test_leader_election_one_leader_takeover_and_graceful_release(
    control_plane: Cluster, namespace: str
) -> None:
    async def scenario(client: KubeClient) -> None:
        def elector(identity: str) -> LeaderElector:
            return LeaderElector(
                client,
                namespace,
                "election",
                identity=identity,
                lease_duration=3.0,
                renew_deadline=2.0,
                retry_period=0.5,
            )

        def leading(flags: dict[str, bool], name: str) -> Callable[[], asyncio.Task[None]]:
            def start() -> asyncio.Task[None]:
                flags[name] = True
                return asyncio.create_task(asyncio.sleep(3600))

            return start

        flags: dict[str, bool] = {}
        a, b = elector("a"), elector("b")
        task_a = asyncio.create_task(a.run(leading(flags, "a")))
        await until(lambda: flags.get("a", False))
        task_b = asyncio.create_task(b.run(leading(flags, "b")))
        await asyncio.sleep(2.0)
        assert not flags.get("b"), "exactly one leader"
        # a stops renewing without releasing (as if it hung or was killed).
        task_a.cancel()
        await asyncio.gather(task_a, return_exceptions=True)
        started = asyncio.get_running_loop().time()
        await until(lambda: flags.get("b", False), timeout=15)
        assert asyncio.get_running_loop().time() - started < 3.0 + 2.0
        # b releases gracefully: a new candidate acquires at once, not after the lease duration.
        await b.release()
        task_b.cancel()
        await asyncio.gather(task_b, return_exceptions=True)
        c = elector("c")
        started = asyncio.get_running_loop().time()
        task_c = asyncio.create_task(c.run(leading(flags, "c")))
        await until(lambda: flags.get("c", False), timeout=15)
        assert asyncio.get_running_loop().time() - started < 1.5
        task_c.cancel()
        await asyncio.gather(task_c, return_exceptions=True)

    run(control_plane, scenario)


def test_events_are_recorded_and_repeats_folded(control_plane: Cluster, namespace: str) -> None:
    async def scenario(client: KubeClient) -> None:
        obj = await client.create(CONFIGMAPS.path(namespace), configmap("noted"))
        obj.update(apiVersion="v1", kind="ConfigMap")
        recorder = EventRecorder(client, "test-instance")
        await recorder.record(obj, "Normal", "Bound", "bound to somewhere")
        await recorder.record(obj, "Normal", "Bound", "bound to somewhere")
        await recorder.record(obj, "Warning", "Quarantined", "evidence remains")

    run(control_plane, scenario)
    shown = control_plane.kubectl(
        "get", "events", "-n", namespace, "--field-selector=involvedObject.name=noted", "-o", "json"
    )
    events = json.loads(shown.stdout)["items"]
    assert sorted(e["reason"] for e in events) == ["Bound", "Quarantined"]
    bound = next(e for e in events if e["reason"] == "Bound")
    assert bound.get("series", {}).get("count") == 2 or bound.get("count") == 2
