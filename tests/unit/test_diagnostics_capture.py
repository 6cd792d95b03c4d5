"""A diagnostics capture reads a cluster its tenant controls: answers that never end, that
inflate, that name paths, or that never come must cost no more than the pool's bounds.

The cluster here is a real HTTP server on loopback whose answers are written by the test: a
real kube-apiserver never sends these, and a hostile tenant's cluster (an aggregated API, a
proxy in front of its API server) can, so this is the one place the API server is stood in for.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import tarfile
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import yaml

from lessor.operator.diagnostics.bundle import BundleWriter
from lessor.operator.diagnostics.capture import capture_cluster
from lessor.operator.diagnostics.cluster_reader import ClusterReader, ReadError

Answer = Callable[[BaseHTTPRequestHandler], None]


def _json(document: Any) -> Answer:
    def answer(handler: BaseHTTPRequestHandler) -> None:
        body = json.dumps(document).encode()
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    return answer


def _endless(handler: BaseHTTPRequestHandler) -> None:
    handler.send_response(200)
    handler.end_headers()
    try:
        while True:
            handler.wfile.write(b"x" * 65536)
    except OSError:
        return


def _silent(handler: BaseHTTPRequestHandler) -> None:
    time.sleep(30)


@pytest.fixture
def cluster() -> Iterator[tuple[dict[str, Answer], str]]:
    """A server answering each path from the dict (404 for any other), and a kubeconfig of it."""
    routes: dict[str, Answer] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            answer = routes.get(self.path.split("?")[0])
            if answer is None:
                self.send_error(404)
                return
            answer(self)

        def log_message(self, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    kubeconfig = yaml.safe_dump(
        {
            "clusters": [
                {"name": "c", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}
            ],
            "users": [{"name": "u", "user": {"token": "t"}}],
        }
    )
    yield routes, kubeconfig
    server.shutdown()


def _read(kubeconfig: str, path: str, limit: int) -> tuple[bytes, bool]:
    async def read() -> tuple[bytes, bool]:
        reader = ClusterReader(kubeconfig)
        try:
            return await reader.get(path, limit)
        finally:
            await reader.close()

    return asyncio.run(read())


def test_an_answer_that_never_ends_is_cut_at_the_limit(
    cluster: tuple[dict[str, Answer], str],
) -> None:
    routes, kubeconfig = cluster
    routes["/api/v1/pods"] = _endless
    body, cut = _read(kubeconfig, "/api/v1/pods", 100_000)
    assert cut and len(body) == 100_000


def test_a_compressed_answer_is_counted_as_sent_never_inflated(
    cluster: tuple[dict[str, Answer], str],
) -> None:
    routes, kubeconfig = cluster
    bomb = gzip.compress(b"\0" * 50_000_000)

    def answer(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Encoding", "gzip")
        handler.send_header("Content-Length", str(len(bomb)))
        handler.end_headers()
        handler.wfile.write(bomb)

    routes["/version"] = answer
    body, cut = _read(kubeconfig, "/version", 1_000_000)
    assert body == bomb and not cut  # 50 MB of zeros stay the 50 kB that was sent


def test_an_error_answer_is_a_read_error_with_a_bounded_body(
    cluster: tuple[dict[str, Answer], str],
) -> None:
    _, kubeconfig = cluster
    with pytest.raises(ReadError, match="404") as raised:
        _read(kubeconfig, "/api/v1/nodes", 1000)
    assert len(str(raised.value)) < 1000


def _capture(kubeconfig: str, max_bytes: int, timeout: float = 20.0) -> dict[str, Any]:
    writer = BundleWriter(max_bytes)

    async def run() -> bool:
        reader = ClusterReader(kubeconfig)
        try:
            async with asyncio.timeout(timeout):
                await capture_cluster(reader, writer, log_lines=10)
        except TimeoutError:
            return True
        finally:
            await reader.close()
        return False

    timed_out = asyncio.run(run())
    with tarfile.open(fileobj=writer.finish({"timedOut": timed_out}), mode="r:gz") as archive:
        files = {m.name: archive.extractfile(m).read() for m in archive.getmembers()}  # type: ignore[union-attr]
    writer.close()
    return files


def test_names_from_the_cluster_never_become_paths_outside_the_bundle(
    cluster: tuple[dict[str, Answer], str],
) -> None:
    routes, kubeconfig = cluster
    running = {"name": "app", "state": {"running": {}}}
    pods = [
        {"metadata": {"namespace": "..", "name": "x"}, "spec": {"nodeName": "n"},
         "status": {"containerStatuses": [running]}},
        {"metadata": {"namespace": "ok", "name": "../../etc"}, "spec": {"nodeName": "n"},
         "status": {"containerStatuses": [running]}},
        {"metadata": {"namespace": "ok", "name": "web"}, "spec": {"nodeName": "n"},
         "status": {"containerStatuses": [running, {"name": "../c", "state": {"running": {}}}]}},
    ]  # fmt: skip
    routes["/version"] = _json({"gitVersion": "v1.35.4"})
    routes["/api/v1/nodes"] = _json({"items": [{"metadata": {"name": "n"}}]})
    routes["/api/v1/pods"] = _json({"items": pods})
    routes["/api/v1/namespaces"] = _json({"items": []})
    routes["/api/v1/events"] = _json({"items": []})

    def log(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.end_headers()
        handler.wfile.write(b"hello\n")

    routes["/api/v1/namespaces/ok/pods/web/log"] = log
    files = _capture(kubeconfig, 1_000_000)
    assert [name for name in files if name.startswith("logs/")] == ["logs/ok/web/app.log"]
    assert files["logs/ok/web/app.log"] == b"hello\n"
    assert all(".." not in name for name in files)


def test_a_bundle_never_outgrows_its_budget_and_says_what_was_cut(
    cluster: tuple[dict[str, Answer], str],
) -> None:
    routes, kubeconfig = cluster
    routes["/version"] = _json({"gitVersion": "v1.35.4"})
    routes["/api/v1/events"] = _json({"items": [{"message": "x" * 1000}] * 500})
    routes["/api/v1/pods"] = _endless
    files = _capture(kubeconfig, 200_000)
    manifest = json.loads(files.pop("capture.json"))
    assert sum(map(len, files.values())) <= 200_000
    by_name = {entry["name"]: entry for entry in manifest["files"]}
    assert by_name["cluster/pods.json"].get("truncated") or by_name["cluster/pods.json"].get(
        "error"
    )
    assert "404" in by_name["cluster/nodes.json"]["error"]
    assert manifest["truncated"] is True


def test_a_cluster_that_never_answers_costs_the_timeout_and_no_more(
    cluster: tuple[dict[str, Answer], str],
) -> None:
    routes, kubeconfig = cluster
    routes["/version"] = _silent
    started = time.monotonic()
    files = _capture(kubeconfig, 1_000_000, timeout=1.0)
    assert time.monotonic() - started < 5  # a hang guard, not a measurement
    assert json.loads(files["capture.json"])["timedOut"] is True


def test_bundle_writer_cuts_the_file_that_crosses_the_budget() -> None:
    writer = BundleWriter(100)
    writer.add("a", b"1" * 60)
    writer.add("b", b"2" * 60)
    writer.add("c", b"3")
    writer.failed("d", "refused")
    with tarfile.open(fileobj=writer.finish({}), mode="r:gz") as archive:
        sizes = {m.name: m.size for m in archive.getmembers()}
    writer.close()
    assert sizes["a"] == 60 and sizes["b"] == 40 and sizes["c"] == 0
    assert "d" not in sizes and writer.truncated


def test_a_kubeconfig_confined_to_a_namespace_reads_that_namespace(
    cluster: tuple[dict[str, Answer], str],
) -> None:
    routes, kubeconfig = cluster
    document = yaml.safe_load(kubeconfig)
    document["contexts"] = [{"name": "c", "context": {"cluster": "c", "namespace": "team"}}]

    def forbidden(handler: BaseHTTPRequestHandler) -> None:
        handler.send_error(403)

    pod = {
        "metadata": {"namespace": "team", "name": "job"},
        "spec": {"nodeName": "n"},
        "status": {"containerStatuses": [{"name": "main", "state": {"terminated": {}}}]},
    }
    routes["/api/v1/pods"] = routes["/api/v1/events"] = routes["/api/v1/nodes"] = forbidden
    routes["/api/v1/namespaces/team/pods"] = _json({"items": [pod]})
    routes["/api/v1/namespaces/team/events"] = _json({"items": [{"message": "seen"}]})
    routes["/api/v1/namespaces/team/pods/job/log"] = _json("the job's output")
    files = _capture(yaml.safe_dump(document), 1_000_000)
    assert json.loads(files["cluster/pods.json"])["items"] == [pod]
    assert b"seen" in files["cluster/events.json"]
    assert b"the job's output" in files["logs/team/job/main.log"]
    manifest = {entry["name"]: entry for entry in json.loads(files["capture.json"])["files"]}
    assert "403" in manifest["cluster/nodes.json"]["error"]
