"""Every route that changes state is audited: a new one cannot be added and forgotten."""

from __future__ import annotations

from lessor.apiserver.http.audit import ACTIONS
from lessor.apiserver.routes.app import ROUTES


def test_every_post_patch_and_delete_of_the_route_table_has_an_audit_action() -> None:
    changing = {
        (method.upper(), route.path)
        for route in ROUTES
        for method in route.methods
        if method in {"post", "patch", "delete"}
    }
    assert changing == set(ACTIONS)
