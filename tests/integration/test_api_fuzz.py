"""Every operation of /openapi.json fuzzed with schemathesis, with and without credentials, and
judged by schemathesis's own checks: no generated request makes the server answer 5xx, every
status is one the operation documents, and every body, Content-Type and documented header
conforms to the document the server serves.

Two stacks: the cluster API (agent-sandbox mode disabled, so the /v1/sandbox-leases paths are
404s), and the Sandbox API with `agentSandbox` mode `external` on the real agent-sandbox
controller and operator (the fixtures of test_sandbox_leases). There the generated paths name
real objects part of the time, a Ready lease with a runner, its executions, an ended lease and
the SandboxPools, since generated names alone only ever reach the 404s.

The operations are driven through hypothesis directly (schemathesis's pytest plugin does not
load under pytest 9)."""

from __future__ import annotations

import base64
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.integration import test_sandbox_leases as sandbox
from tests.integration.test_apiserver import ALICE, Stack, stack  # noqa: F401 - the fixture
from tests.integration.test_sandbox_leases import Env, env  # noqa: F401 - the fixture

pytestmark = pytest.mark.integration

# schemathesis counts any status below 200 as a server error; 101 is the upgrade that attach and
# port-forward document. (An explicit config also keeps a schemathesis.toml nearby out.)
CONFIG = schemathesis.Config.from_dict(
    {"checks": {"not_a_server_error": {"expected-statuses": ["101", "2xx", "3xx", "4xx"]}}}
)
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
# A WebSocket handshake: what attach and port-forward check, and refuse, before upgrading.
UPGRADE = {
    "Connection": "Upgrade",
    "Upgrade": "websocket",
    "Sec-WebSocket-Version": "13",
    "Sec-WebSocket-Key": base64.b64encode(bytes(16)).decode(),
}
# Per operation; every case is sent once per credential. Enough to reach each documented
# refusal, few enough to stay within minutes on a busy two-core machine.
EXAMPLES = 20
# A hang guard, not a figure: schemathesis' own 10 s was once outrun at the end of a CI run,
# every worker busy, by a request the same case answered at once on its next try.
REQUEST_CEILING = 60


@dataclass
class Fuzz:
    """One server fuzzed operation by operation; each case is sent once per named token (None:
    no credentials). Keeps the first example of every failed check, and what each operation
    answered."""

    base: str
    tokens: dict[str, str | None]
    failures: dict[str, str] = field(default_factory=dict)
    statuses: Counter[tuple[str, int]] = field(default_factory=Counter)

    def run(
        self, operation: Any, cases: st.SearchStrategy[Any], extra: dict[str, str] | None = None
    ) -> None:
        """Fuzz `operation`, sending the `extra` headers with every case."""
        name = f"{operation.method.upper()} {operation.path}{' (upgrade)' if extra else ''}"

        @settings(
            max_examples=EXAMPLES,
            # The same cases on every run: a CI verdict never depends on the draw (run with
            # more examples by hand to explore further).
            derandomize=True,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=cases)
        def exercise(case: Any) -> None:
            for who, token in self.tokens.items():
                headers = {
                    **(extra or {}),
                    **({"Authorization": f"Bearer {token}"} if token else {}),
                }
                response = case.call(base_url=self.base, headers=headers, timeout=REQUEST_CEILING)
                self.statuses[name, response.status_code] += 1
                try:
                    case.validate_response(response, checks=CHECKS, headers=headers)
                except FailureGroup as group:
                    for failure in group.exceptions:
                        self.failures.setdefault(
                            f"{name} ({who}): {failure.title}",
                            f"{case.method} {case.formatted_path} body={case.body!r} -> "
                            f"{response.status_code} {response.text[:300]}: "
                            f"{failure.message[:500]}",
                        )

        exercise()

    def report(self) -> str:
        return "\n".join(f"{check}\n    {case}" for check, case in sorted(self.failures.items()))


def generated(operation: Any, **fixed: Any) -> st.SearchStrategy[Any]:
    """Valid requests, and requests that break the document: a 400 is the answer to those."""
    return st.one_of(
        *(operation.as_strategy(mode, **fixed) for mode in schemathesis.GenerationMode)
    )


def test_no_generated_request_makes_the_server_fail(stack: Stack) -> None:  # noqa: F811
    schema = schemathesis.openapi.from_url(f"{stack.api.base}/openapi.json", config=CONFIG)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 12
    fuzz = Fuzz(stack.api.base, {"alice": ALICE, "anonymous": None})
    for operation in operations:
        fuzz.run(operation, generated(operation))
    assert not fuzz.failures, fuzz.report()


@dataclass
class Targets:
    """Real objects for the generated paths to name: `leases[0]` is Ready in a pool with a
    runner and owns `executions` (one ended, one running); `leases[1]` has ended."""

    leases: list[str]
    executions: list[str]
    pools: list[str]


@pytest.fixture(scope="module")
def targets(env: Env) -> Iterator[Targets]:  # noqa: F811
    ready = env.create(sandbox.ALICE, pool="sb-run", ttl="30m").body["id"]
    ended = env.create(sandbox.ALICE, pool="sb-warm").body["id"]
    assert env.release(sandbox.ALICE, ended).status == 204
    env.until(sandbox.ALICE, ready, "Ready")
    env.until(sandbox.ALICE, ended, "Released", "Expired", "Quarantined")

    def execute(*command: str, detach: bool) -> str:
        body = {"command": list(command), "idempotencyKey": str(uuid.uuid4()), "detach": detach}
        path = f"/v1/sandbox-leases/{ready}/executions"
        answer = env.api.call("POST", path, token=sandbox.ALICE, body=body)
        assert answer.status == (202 if detach else 200), answer.body
        return str(answer.body["id"])

    done = execute("echo", "fuzz", detach=False)
    running = execute("sleep", "300", detach=True)  # until the fuzz cancels it, or teardown
    yield Targets([ready, ended], [done, running], ["sb-run", "sb-warm"])
    env.api.call("DELETE", f"/v1/sandbox-leases/{ready}/executions/{running}", token=sandbox.ALICE)
    env.release(sandbox.ALICE, ready)


# Fields a generated body almost never gets right, set to values that pass admission, so the
# success answers are judged too: a real pool, the pool's own container, one extension.
REAL_FIELDS: dict[str, dict[str, Any]] = {
    "POST /v1/sandbox-leases": {"pool": "sb-warm"},
    "POST /v1/sandbox-leases/{lease_id}/executions": {"container": "main"},
    "PATCH /v1/sandbox-leases/{lease_id}": {"extendTtl": "1m", "extend_ttl": None},
}


def sandbox_cases(operation: Any, targets: Targets) -> st.SearchStrategy[Any]:
    """Generated cases, also with the path naming the real objects and with REAL_FIELDS.
    Commands run on this host (kwok runs a pod's exec here, as root), so the generated argv is
    handed to `echo`: the server still validates and runs every generated argument, and
    nothing else is run."""
    fixed: list[dict[str, str] | None] = [None]
    if "{lease_id}" in operation.path:
        fixed += [{"lease_id": lease} for lease in targets.leases]
    if "{execution}" in operation.path:
        fixed += [{"lease_id": targets.leases[0], "execution": e} for e in targets.executions]
    if "{name}" in operation.path:
        fixed += [{"name": pool} for pool in targets.pools]
    cases = st.one_of(*(generated(operation, path_parameters=p) for p in fixed))
    real = REAL_FIELDS.get(f"{operation.method.upper()} {operation.path}")
    if real is not None:
        cases = st.one_of(cases, cases.map(lambda case: edited(case, **real)))
    return cases.map(harmless)


def edited(case: Any, **fields: Any) -> Any:
    """`case` with its body's `fields` set, or left out where the value is None."""
    if not isinstance(case.body, dict):
        return case
    body = {**case.body, **fields}
    case.body = {name: value for name, value in body.items() if value is not None}
    return case


def harmless(case: Any) -> Any:
    if isinstance(case.body, dict) and isinstance(case.body.get("command"), list):
        return edited(case, command=["echo", *case.body["command"][1:]])
    return case


def test_no_generated_sandbox_request_makes_the_server_fail(
    env: Env,  # noqa: F811
    targets: Targets,
) -> None:
    base = env.api.api.base
    schema = schemathesis.openapi.from_url(f"{base}/openapi.json", config=CONFIG)
    operations = [
        operation
        for result in schema.get_all_operations()
        if (operation := result.ok()).path.startswith(("/v1/sandbox-leases", "/v1/pools"))
        or operation.path == "/v1/status"
    ]
    assert len(operations) >= 15
    # Releasing the Ready lease ends what the other operations can reach: it goes last.
    operations.sort(
        key=lambda o: f"{o.method.upper()} {o.path}" == "DELETE /v1/sandbox-leases/{lease_id}"
    )
    # carol, another tenant, may hold one Sandbox at a time: the fuzz's creates stay few.
    fuzz = Fuzz(base, {"alice": sandbox.ALICE, "carol": sandbox.CAROL, "anonymous": None})
    for operation in operations:
        fuzz.run(operation, sandbox_cases(operation, targets))
        if operation.path.endswith(("/attach", "/port-forward")):
            # Without the handshake both are 426s; with it, every refusal is reached, and an
            # attach to the Ready lease opens a session (101) that ends as the client closes.
            fuzz.run(operation, sandbox_cases(operation, targets), UPGRADE)
    answered = sorted(fuzz.statuses.items())
    print("\n".join(f"{count:4} {name} {status}" for (name, status), count in answered))
    assert not fuzz.failures, fuzz.report()
    reached = {name for (name, status), _ in answered if "{lease_id}" in name and status < 300}
    assert len(reached) >= 5, f"the fuzz hardly reached the real objects: {answered}"
