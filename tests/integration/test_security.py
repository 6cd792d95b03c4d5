"""The findings of the trust-boundary review (issue 18), each reproduced on the real stack: the
local control plane, the operator, and two API servers under gunicorn, with static tokens, the
cluster's own OIDC issuer and SSH signatures. Each test failed on the code before its fix."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest

from tests.integration.operator_harness import wait_for
from tests.integration.test_apiserver import (  # noqa: F401 - the fixture
    ALICE,
    BOB,
    Stack,
    lease_until,
    stack,
)

pytestmark = pytest.mark.integration


def _lease(stack: Stack, name: str) -> dict[str, Any]:  # noqa: F811
    shown = stack.cluster.kubectl("get", "clusterlease", name, "-n", stack.namespace, "-o", "json")
    lease: dict[str, Any] = json.loads(shown.stdout)
    return lease


def _phase(stack: Stack, name: str) -> str | None:  # noqa: F811
    phase: str | None = _lease(stack, name).get("status", {}).get("phase")
    return phase


def _moment(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


# -- item 4: extensions within maxTtl; every duration bounded ---------------------------------


def test_an_extension_never_carries_a_lease_past_its_rules_max_ttl(stack: Stack) -> None:  # noqa: F811
    """alice's rule has maxTtl 1h. An extension of 8000h carries her lease to exactly 1h after
    it was bound (not 8000h later), and the operator enforces that same expiry; a lease that
    already lasts 1h is refused any extension, 409 max_ttl_ceiling."""
    created = stack.api.call(
        "POST", "/v1/leases", token=ALICE, body={"profile": "api-warm", "ttl": "30m"}
    )
    assert created.status == 202, created.body
    lease = created.body["id"]
    lease_until(stack, ALICE, lease, "Bound")
    bound_at = _moment(_lease(stack, lease)["status"]["boundAt"])
    extended = stack.api.call(
        "PATCH", f"/v1/leases/{lease}", token=ALICE, body={"extend_ttl": "8000h"}
    )
    assert extended.status == 200, extended.body
    ceiling = bound_at + datetime.timedelta(hours=1)
    assert _moment(extended.body["expires_at"]) == ceiling
    wait_for(
        "the operator's expiry",
        lambda: _lease(stack, lease)["status"].get("expiresAt") == extended.body["expires_at"],
    )
    assert stack.api.call("DELETE", f"/v1/leases/{lease}", token=ALICE).status == 204

    full = stack.api.call(
        "POST", "/v1/leases", token=ALICE, body={"profile": "api-warm", "ttl": "1h"}
    ).body
    assert full["effective_ttl"] == "1h"
    lease_until(stack, ALICE, full["id"], "Bound")
    refused = stack.api.call(
        "PATCH", f"/v1/leases/{full['id']}", token=ALICE, body={"extend_ttl": "10m"}
    )
    assert (refused.status, refused.body["reason"]) == (409, "max_ttl_ceiling"), refused.body
    assert _lease(stack, full["id"])["spec"].get("extensions") in (None, []), "nothing spent"
    assert stack.api.call("DELETE", f"/v1/leases/{full['id']}", token=ALICE).status == 204


@pytest.mark.parametrize("duration", ["99999999h", "8761h", "525601m"])
def test_a_duration_beyond_a_year_is_refused_at_every_door(stack: Stack, duration: str) -> None:  # noqa: F811
    """bob's rule has no maxTtl. A TTL or an extension over a year is a 400 naming the field,
    through the API, and the CRD refuses it from anyone writing the object directly: nothing
    the operator is given can overflow (a TTL of 99999999h used to be admitted, bound, and then
    fail every reconcile, so that a release never ended the lease)."""
    created = stack.api.call(
        "POST", "/v1/leases", token=BOB, body={"profile": "api-cold", "ttl": duration}
    )
    assert created.status == 400 and "ttl" in created.body["detail"], created.body
    pending = stack.api.call("POST", "/v1/leases", token=BOB, body={"profile": "api-cold"}).body
    extended = stack.api.call(
        "PATCH", f"/v1/leases/{pending['id']}", token=BOB, body={"extend_ttl": duration}
    )
    assert extended.status == 400 and "extend_ttl" in extended.body["detail"], extended.body
    assert stack.api.call("DELETE", f"/v1/leases/{pending['id']}", token=BOB).status == 204
    direct = {
        "apiVersion": "lessor.dev/v1alpha1",
        "kind": "ClusterLease",
        "metadata": {"name": "direct-absurd", "namespace": stack.namespace},
        "spec": {"pool": "api-cold", "ttl": duration, "requester": "bob"},
    }
    written = stack.cluster.kubectl("create", "-f", "-", input=json.dumps(direct), check=False)
    assert written.returncode != 0 and "spec.ttl" in written.stderr, written.stderr


def test_the_operator_binds_and_releases_a_lease_at_every_bound(stack: Stack) -> None:  # noqa: F811
    """The longest lease the CRD admits, written directly (a year, and a hundred extensions of
    a year each): the operator binds it, computes its expiry without overflowing, and a
    release ends it."""
    year = "8760h"
    direct = {
        "apiVersion": "lessor.dev/v1alpha1",
        "kind": "ClusterLease",
        "metadata": {"name": "longest", "namespace": stack.namespace},
        "spec": {
            "pool": "api-warm",
            "ttl": year,
            "requester": "nobody-at-all",
            "maxExtensions": 100,
            "extensions": [{"ttl": year}] * 100,
        },
    }
    stack.cluster.kubectl("create", "-f", "-", input=json.dumps(direct))
    bound = wait_for(
        "Bound",
        lambda: (
            _lease(stack, "longest").get("status", {}).get("phase") == "Bound"
            and _lease(stack, "longest")
        ),
    )
    expiry = _moment(bound["status"]["expiresAt"])
    assert expiry - _moment(bound["status"]["boundAt"]) == datetime.timedelta(hours=8760 * 101)
    stack.cluster.kubectl(
        "patch", "clusterlease", "longest", "-n", stack.namespace, "--type=merge",
        "-p", '{"spec": {"releaseRequested": true}}',
    )  # fmt: skip
    wait_for("Released", lambda: _phase(stack, "longest") == "Released")
