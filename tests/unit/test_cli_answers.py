"""The CLI reads the API's answers through the response models (lessor.cli.answers): an answer
that fits is a model, one that does not is one line naming the request and the field, exit 1
and no traceback, and never the value it was about (an answer may carry a kubeconfig or a
session token). Fields a newer server adds are ignored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lessor.cli.answers import MalformedAnswerError, as_sent, read, read_list
from lessor.cli.client import Client
from lessor.cli.config import Target
from lessor.cli.errors import SERVER
from lessor.protocol.responses import Lease, LeaseCreated, LeaseSummary, PoolRecord
from tests.unit.test_cli import Scripted, lessor, one_line_error, pool_record

SECRET = "s3cret-" + "k" * 20
TOKEN = {"LESSOR_TOKEN": "tok-" + "z" * 20}
LEASE_ID = "l0123abcd4567"
BOUND = {
    "id": LEASE_ID,
    "phase": "Bound",
    "profile": "ci-small",
    "expires_at": "2030-01-01T00:00:00Z",
    "alias": "pr-7",
    "kubeconfig": "apiVersion: v1\n",
}


def test_an_answer_that_fits_is_its_model_and_is_shown_as_sent() -> None:
    lease = read(Lease, BOUND, "GET", f"/v1/leases/{LEASE_ID}")
    assert (lease.phase, lease.kubeconfig, lease.queue_position) == (
        "Bound",
        "apiVersion: v1\n",
        None,
    )
    assert as_sent(lease) == BOUND, "the fields sent, no more: a null stays, an absent one too"
    pending = {**BOUND, "phase": "Pending", "expires_at": None}
    assert as_sent(read(Lease, pending, "GET", "/v1/leases/x")) == pending
    pool = read(PoolRecord, pool_record("ci-small"), "GET", "/v1/pools/ci-small")
    assert pool.resource_kind == "Cluster" and as_sent(pool) == pool_record("ci-small")


def test_fields_a_newer_server_adds_are_ignored() -> None:
    newer = {**BOUND, "cluster_class": "large", "health": {"nodes": 3}}
    assert read(Lease, newer, "GET", "/v1/leases/x") == read(Lease, BOUND, "GET", "/v1/leases/x")


def _refusal(model: type[Lease], body: object) -> str:
    with pytest.raises(MalformedAnswerError) as raised:
        read(model, body, "GET", f"/v1/leases/{LEASE_ID}?waitSeconds=20")
    assert raised.value.code == SERVER
    return str(raised.value)


def test_a_missing_field_is_named_with_the_request() -> None:
    said = _refusal(Lease, {key: v for key, v in BOUND.items() if key != "profile"})
    assert said.startswith(f"the answer to GET /v1/leases/{LEASE_ID} is not a Lease")
    assert "profile: Field required" in said
    assert "waitSeconds" not in said


def test_a_mistyped_field_is_named_and_its_value_never_said() -> None:
    mistyped = {**BOUND, "kubeconfig": {"token": SECRET}, "phase": f"Bound-{SECRET}"}
    said = _refusal(Lease, mistyped)
    assert "kubeconfig: Input should be a valid string" in said
    assert "phase: Input should be 'Pending', 'Bound'" in said
    assert SECRET not in said
    nested = {**BOUND, "cluster_health": {"healthy": SECRET, "since": "t", "message": SECRET}}
    said = _refusal(Lease, nested)
    assert "cluster_health.healthy: Input should be a valid boolean" in said
    assert SECRET not in said
    assert "the body: Input should be a valid dictionary" in _refusal(Lease, [SECRET])


def test_a_listing_names_the_item_that_does_not_fit() -> None:
    listed = read_list(LeaseSummary, [BOUND, {**BOUND, "id": "l1"}], "GET", "/v1/leases")
    assert [lease.id for lease in listed] == [LEASE_ID, "l1"]
    with pytest.raises(MalformedAnswerError, match=r"item 1: phase: Field required"):
        read_list(LeaseSummary, [BOUND, {"id": "l1", "profile": "p"}], "GET", "/v1/leases")
    with pytest.raises(MalformedAnswerError, match=r"not a list of LeaseSummary.*should be a list"):
        read_list(LeaseSummary, {"leases": []}, "GET", "/v1/leases")


def test_the_client_reads_through_the_model() -> None:
    server = Scripted([(200, {}, BOUND), (200, {}, [BOUND]), (200, {}, {"id": SECRET})])
    client = Client(Target(endpoint=server.url, auth="token", token="t0k"))
    try:
        assert client.get_model(f"/v1/leases/{LEASE_ID}", Lease).alias == "pr-7"
        assert [lease.id for lease in client.get_models("/v1/leases", LeaseSummary)] == [LEASE_ID]
        with pytest.raises(MalformedAnswerError) as raised:
            client.call_model("POST", "/v1/leases", LeaseCreated, {"profile": "ci-small"})
    finally:
        server.server.shutdown()
    said = str(raised.value)
    assert "POST /v1/leases is not a LeaseCreated" in said and SECRET not in said


@pytest.mark.parametrize(
    ("script", "args", "named"),
    [
        pytest.param(
            [(200, {}, {**BOUND, "phase": None, "kubeconfig": [SECRET]})],
            ["get", LEASE_ID],
            f"GET /v1/leases/{LEASE_ID} is not a Lease",
            id="get",
        ),
        pytest.param(
            [(200, {}, {**pool_record("ci-small"), "resourceKind": SECRET})],
            ["lease", "ci-small"],
            "GET /v1/pools/ci-small is not a PoolRecord",
            id="lease-pool",
        ),
        pytest.param(
            [(200, {}, pool_record("ci-small")), (202, {}, {**BOUND, "phase": "Pending"})],
            ["lease", "ci-small", "--no-wait"],
            "POST /v1/leases is not a LeaseCreated this lessor",
            id="lease-created",
        ),
        pytest.param(
            [(200, {}, {"version": "9", "auth": {"methods": SECRET}, "pools": [], "sandbox": {}})],
            ["status"],
            "GET /v1/status is not a Status",
            id="status",
        ),
        pytest.param(
            [(200, {}, {"session_token": [SECRET], "identity": "me", "method": "token"})],
            ["login"],
            "POST /v1/login is not a SessionIssued",
            id="login",
        ),
    ],
)
def test_a_command_given_an_answer_that_does_not_fit_says_one_line_and_exits_1(
    tmp_path: Path, script: list[object], args: list[str], named: str
) -> None:
    server = Scripted(script)
    try:
        result = lessor(tmp_path, "--endpoint", server.url, *args, env=TOKEN)
    finally:
        server.server.shutdown()
    line = one_line_error(result)  # one `lessor: ...` line, no traceback
    assert result.returncode == 1, result.stderr
    assert named in line and SECRET not in line and result.stdout == ""
    sessions = tmp_path / "config" / "lessor" / "sessions.json"
    assert not sessions.exists() or json.loads(sessions.read_text()) == {}
