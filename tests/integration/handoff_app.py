"""One Sandbox lease create through the API app in-process, with the Kubernetes create call's
answer lost: the fault behind the handoff variant (spec 4.3), which a real API server cannot be
made to produce on demand. This is the one simulated part; the app, authentication, policy,
pool and the Kubernetes API are real.

    python handoff_app.py KUBECONFIG NAMESPACE TOKEN lost-answer|never-sent|stopping

`lost-answer` sends the create and then raises a read timeout instead of returning its answer;
`never-sent` raises the timeout without sending. `stopping` plays a worker that gunicorn is
stopping (its SIGTERM cannot be timed against one request on demand) in front of a Kubernetes
API that takes 5 s to answer the create: the create is sent, and its answer comes only to a
caller that waits that long (a read timeout below 5 s is raised). Prints {status, location,
body} as JSON.
"""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace
from typing import Any

import urllib3
from falcon import testing

from lessor.apiserver.http import lifecycle
from lessor.apiserver.routes.app import create_app
from lessor.apiserver.routes.settings import Settings
from lessor.apiserver.state.kube import Kube


def main() -> None:
    kubeconfig, namespace, token, mode = sys.argv[1:5]
    real_create = Kube.create

    def lossy_create(
        self: Kube, plural: str, body: dict[str, Any], timeout: float = 10
    ) -> dict[str, Any]:
        if plural != "sandboxleases" or body["spec"].get("cancelled"):
            return real_create(self, plural, body, timeout)
        if mode in ("lost-answer", "stopping"):
            created = real_create(self, plural, body, timeout)
            if mode == "stopping" and timeout >= 5:
                return created  # a caller that waits 5 s gets the answer
        raise urllib3.exceptions.ReadTimeoutError(None, "/apis", "read timed out (simulated)")  # type: ignore[arg-type]

    Kube.create = lossy_create  # type: ignore[method-assign]
    if mode == "stopping":
        lifecycle.watch(SimpleNamespace(alive=False))
    settings = Settings(namespace=namespace, kubeconfig=kubeconfig, agent_sandbox_mode="external")
    client = testing.TestClient(create_app(settings))
    result = client.simulate_post(
        "/v1/sandbox-leases",
        json={"pool": "sb-stuck", "idempotencyKey": f"handoff-{mode}"},
        headers={"Authorization": f"Bearer {token}"},
    )
    print(json.dumps({
        "status": result.status_code,
        "location": result.headers.get("Location"),
        "body": result.json,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
