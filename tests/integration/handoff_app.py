"""One Sandbox lease create through the API app in-process, with the Kubernetes create call's
answer lost: the fault behind the handoff variant (spec 4.3), which a real API server cannot be
made to produce on demand. This is the one simulated part; the app, authentication, policy,
pool and the Kubernetes API are real.

    python handoff_app.py KUBECONFIG NAMESPACE TOKEN lost-answer|never-sent

`lost-answer` sends the create and then raises a read timeout instead of returning its answer;
`never-sent` raises the timeout without sending. Prints {status, location, body} as JSON.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import urllib3
from falcon import testing

from lessor.apiserver.http.app import create_app
from lessor.apiserver.http.settings import Settings
from lessor.apiserver.state.kube import Kube


def main() -> None:
    kubeconfig, namespace, token, mode = sys.argv[1:5]
    real_create = Kube.create

    def lossy_create(self: Kube, plural: str, body: dict[str, Any]) -> dict[str, Any]:
        if plural != "sandboxleases" or body["spec"].get("cancelled"):
            return real_create(self, plural, body)
        if mode == "lost-answer":
            real_create(self, plural, body)
        raise urllib3.exceptions.ReadTimeoutError(None, "/apis", "read timed out (simulated)")  # type: ignore[arg-type]

    Kube.create = lossy_create  # type: ignore[method-assign]
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
