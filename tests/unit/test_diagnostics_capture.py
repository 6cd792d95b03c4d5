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
import tracemalloc
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from lessor.operator.diagnostics import bundle_contents, list_page
from lessor.operator.diagnostics.bundle import Budget, BundleWriter
from lessor.operator.diagnostics.bundle_contents import capture_cluster
from lessor.operator.diagnostics.cluster_reader import ClusterReader, ReadError
from lessor.operator.diagnostics.turns import Turns

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
        reader = ClusterReader(kubeconfig, Budget(10**9))
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


def _capture(kubeconfig: str, max_bytes: int, timeout: float = 20.0) -> dict[str, bytes]:
    writer = BundleWriter(max_bytes)
    timed_out = _run_capture(kubeconfig, writer, timeout)
    return _files_of(writer, timed_out)


def _run_capture(kubeconfig: str, writer: BundleWriter, timeout: float = 20.0) -> bool:
    """Capture into `writer`; whether the capture ran out of time."""

    async def run() -> bool:
        reader = ClusterReader(kubeconfig, writer.budget)
        try:
            async with asyncio.timeout(timeout):
                await capture_cluster(reader, writer, log_lines=10)
        except TimeoutError:
            return True
        finally:
            await reader.close()
        return False

    return asyncio.run(run())


def _files_of(writer: BundleWriter, timed_out: bool) -> dict[str, bytes]:
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
    assert by_name["cluster/pods/page-0001.json"]["cut"] == "cut at maxBytes"
    assert "404" in by_name["cluster/nodes/page-0001.json"]["error"]
    assert "full" in by_name["cluster/events/page-0001.json"]["cut"]
    assert manifest["truncated"] is True and manifest["budgetUsed"] <= 200_000


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
    assert json.loads(files["cluster/pods/page-0001.json"])["items"] == [pod]
    assert b"seen" in files["cluster/events/page-0001.json"]
    assert b"the job's output" in files["logs/team/job/main.log"]
    manifest = {entry["name"]: entry for entry in json.loads(files["capture.json"])["files"]}
    assert "403" in manifest["cluster/nodes/page-0001.json"]["error"]


def _pages(*pages: bytes) -> Answer:
    """A list answered a page at a time: the first page without a continue token, page n+1 for
    the token `n`, as the pages themselves say."""

    def answer(handler: BaseHTTPRequestHandler) -> None:
        token = parse_qs(urlsplit(handler.path).query).get("continue", ["0"])[0]
        body = pages[int(token)]
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    return answer


def _page(number: int, items: list[Any], *, last: bool = False) -> bytes:
    metadata = {"resourceVersion": "7"} if last else {"continue": str(number + 1)}
    return json.dumps({"kind": "List", "metadata": metadata, "items": items}).encode()


def _huge(size: int, head: bytes = b'{"items":[') -> Answer:
    """A 200 of `size` bytes of `{},{},...`, streamed: a hostile tenant's page (N7)."""

    def answer(handler: BaseHTTPRequestHandler) -> None:
        chunk = b"{}," * 21845
        handler.send_response(200)
        handler.send_header("Content-Length", str(size))
        handler.end_headers()
        try:
            handler.wfile.write(head)
            for _ in range((size - len(head)) // len(chunk)):
                handler.wfile.write(chunk)
        except OSError:
            return

    return answer


def test_pages_are_filed_raw_as_they_come(cluster: tuple[dict[str, Answer], str]) -> None:
    routes, kubeconfig = cluster
    # Spacing and key order as the cluster chose them: the bundle keeps the bytes it was sent.
    first = b'{ "kind" : "NamespaceList" , "metadata" : {"continue":"1"}, "items" : [{"a":1}] }'
    second = _page(1, [{"metadata": {"name": "b\\u00e9"}}], last=True)
    routes["/api/v1/namespaces"] = _pages(first, second)
    files = _capture(kubeconfig, 1_000_000)
    assert files["cluster/namespaces/page-0001.json"] == first
    assert files["cluster/namespaces/page-0002.json"] == second
    assert not [name for name in files if name.startswith("cluster/namespaces/page-0003")]
    assert json.loads(files["capture.json"])["truncated"] is False


def test_a_list_stops_after_max_pages(
    cluster: tuple[dict[str, Answer], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    routes, kubeconfig = cluster
    monkeypatch.setattr(bundle_contents, "MAX_PAGES", 3)
    routes["/api/v1/events"] = _pages(*(_page(n, [{"n": n}]) for n in range(5)))
    files = _capture(kubeconfig, 1_000_000)
    assert sorted(n for n in files if n.startswith("cluster/events/")) == [
        f"cluster/events/page-000{n}.json" for n in (1, 2, 3)
    ]
    manifest = json.loads(files["capture.json"])
    cut = {e["name"]: e for e in manifest["files"]}["cluster/events/"]
    assert cut["truncated"] is True and "more than 3 pages" in cut["cut"]
    assert manifest["truncated"] is True


def test_every_byte_read_counts_against_the_budget_and_reading_stops_with_it(
    cluster: tuple[dict[str, Answer], str],
) -> None:
    routes, kubeconfig = cluster
    seen: list[str] = []
    pages = [_page(n, [{"x": "y" * 30_000}]) for n in range(10)]
    listed = _pages(*pages)

    def counted(handler: BaseHTTPRequestHandler) -> None:
        seen.append(handler.path)
        listed(handler)

    routes["/api/v1/namespaces"] = routes["/api/v1/nodes"] = counted
    files = _capture(kubeconfig, 100_000)
    manifest = json.loads(files.pop("capture.json"))
    assert sum(map(len, files.values())) <= manifest["budgetUsed"] <= 100_000
    by_name = {e["name"]: e for e in manifest["files"]}
    assert by_name["cluster/namespaces/page-0004.json"]["cut"] == "cut at maxBytes"
    assert "full" in by_name["cluster/namespaces/page-0005.json"]["cut"]
    assert "full" in by_name["cluster/nodes/page-0001.json"]["cut"]
    assert len(seen) == 4, "nothing is asked for once the budget is spent"


def test_a_huge_page_costs_a_page_of_memory_and_is_cut_at_the_page_bound(
    cluster: tuple[dict[str, Answer], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """N7's page: 40 MiB of empty objects (CPython makes about a gigabyte of them), for every
    list, with the largest budget a pool may set. Each page is kept up to the page bound (2 MiB
    here), raw; the pods' items are decoded one at a time, as many as LOG_PODS; the capture's
    peak of Python memory stays within a few pages."""
    routes, kubeconfig = cluster
    monkeypatch.setattr(bundle_contents, "PAGE_BYTES", 2 * 1024 * 1024)
    for path in ("/api/v1/namespaces", "/api/v1/nodes", "/api/v1/pods", "/api/v1/events"):
        routes[path] = _huge(40 * 1024 * 1024)
    writer = BundleWriter(1024 * 1024 * 1024)
    tracemalloc.start()
    try:
        timed_out = _run_capture(kubeconfig, writer)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * bundle_contents.PAGE_BYTES, f"{peak / 2**20:.1f} MiB"
    files = _files_of(writer, timed_out)
    manifest = json.loads(files["capture.json"])
    by_name = {e["name"]: e for e in manifest["files"]}
    for listed in ("namespaces", "nodes", "pods", "events"):
        name = f"cluster/{listed}/page-0001.json"
        assert len(files[name]) == 2 * 1024 * 1024
        assert by_name[name]["cut"] == "cut at the page bound (2 MiB)"
    assert "more than 1000 pods" in by_name["logs/"]["cut"]
    assert manifest["truncated"] is True and manifest["timedOut"] is False


def test_the_pods_logs_are_read_within_their_bounds(
    cluster: tuple[dict[str, Answer], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    routes, kubeconfig = cluster
    monkeypatch.setattr(bundle_contents, "LOG_FILES", 2)

    def pod(name: str, **extra: Any) -> dict[str, Any]:
        started = [{"name": c, "state": {"running": {}}} for c in ("a", "b")]
        return {
            "metadata": {"namespace": "ns", "name": name, **extra},
            "spec": {"nodeName": "n"},
            "status": {"containerStatuses": started},
        }

    def log(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.end_headers()
        handler.wfile.write(handler.path.encode())

    routes["/api/v1/pods"] = _pages(_page(0, [pod("p1"), pod("p2")], last=True))
    for name in ("p1", "p2"):
        routes[f"/api/v1/namespaces/ns/pods/{name}/log"] = log
    files = _capture(kubeconfig, 1_000_000)
    assert sorted(n for n in files if n.startswith("logs/")) == [
        "logs/ns/p1/a.log",
        "logs/ns/p1/b.log",
    ]
    cut = {e["name"]: e for e in json.loads(files["capture.json"])["files"]}["logs/"]["cut"]
    assert "more than 2 logs" in cut

    monkeypatch.setattr(bundle_contents, "LOG_FILES", 1000)
    huge = pod("p2", annotations={"big": "x" * (list_page.WINDOW + 1)})
    routes["/api/v1/pods"] = _pages(_page(0, [pod("p1"), huge], last=True))
    files = _capture(kubeconfig, 10_000_000)
    assert sorted(n for n in files if n.startswith("logs/")) == [
        "logs/ns/p1/a.log",
        "logs/ns/p1/b.log",
    ]
    cut = {e["name"]: e for e in json.loads(files["capture.json"])["files"]}["logs/"]["cut"]
    assert "a pod larger than 256 KiB" in cut


def test_a_page_is_read_one_value_at_a_time() -> None:
    page = (
        b'{"kind":"PodList","metadata":{"continue":"abc","remainingItemCount":2},'
        b' "items": [ {"name":"\xc3\xa9\xf0\x9f\x99\x82"} ,{"n":1}, 7 ] ,"extra":[]}'
    )
    head = list_page.read_head(page)
    assert head.continue_token == "abc" and head.items is not None
    assert list(list_page.items(page, head.items)) == [{"name": "\u00e9\U0001f642"}, {"n": 1}, 7]
    after = list_page.read_head(b'{"items":[],"metadata":{"continue":"late"}}')
    assert after.continue_token is None, "a token after the items ends the list"
    assert list_page.read_head(b'{"metadata":{}}') == list_page.Head(None, None)
    cut = b'{"items":[{"a":1},{"b":'
    with pytest.raises(list_page.PageError):
        list(list_page.items(cut, list_page.read_head(cut).items or 0))
    with pytest.raises(list_page.TooLargeError):
        list_page.read_head(b'{"metadata":{"x":"' + b"y" * list_page.WINDOW + b'"}}')
    started = time.monotonic()
    with pytest.raises(list_page.TooLargeError):  # members enough to cost minutes, one by one
        list_page.read_head(b"{" + b'"a":0,' * 1_000_000 + b'"items":[]}')
    assert time.monotonic() - started < 5  # a hang guard, not a measurement
    for malformed in (b"[]", b"", b'{"a" 1}', b"{1:2}"):
        with pytest.raises(list_page.PageError):
            list_page.read_head(malformed)


def test_one_owner_takes_at_most_its_share_of_the_turns() -> None:
    async def scenario() -> list[str]:
        turns = Turns(total=4, per_owner=2)
        started: list[str] = []
        release = asyncio.Event()

        async def capture(owner: str, name: str) -> None:
            async with turns.turn(owner):
                started.append(name)
                await release.wait()

        tasks = [asyncio.create_task(capture("a", f"a{n}")) for n in range(4)]
        tasks += [asyncio.create_task(capture("b", "b1")), asyncio.create_task(capture("c", "c1"))]
        tasks.append(asyncio.create_task(capture("d", "d1")))
        for _ in range(10):
            await asyncio.sleep(0)
        running = list(started)
        release.set()
        await asyncio.gather(*tasks)
        assert sorted(started) == ["a0", "a1", "a2", "a3", "b1", "c1", "d1"]
        return running

    assert asyncio.run(scenario()) == ["a0", "a1", "b1", "c1"]
