"""Calls to the lessor runner in a sandbox pod, through the Kubernetes pods/exec API.

One JSON request goes to the runner's stdin and one JSON answer comes back on its stdout
(lessor.runner.runner). The kubernetes client's `stream` swaps the transport of the ApiClient it
is given for the duration of the call; under gevent other requests of the worker would run on
that ApiClient meanwhile, so every call gets an ApiClient of its own.
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import stream

from lessor.apiserver.kube import Kube

Json = dict[str, Any]


class RunnerError(Exception):
    """The runner could not be reached, or did not answer with JSON."""


def call_runner(
    kube: Kube, pod: str, container: str | None, path: str, request: Json, *, timeout: float = 15
) -> Json:
    core = client.CoreV1Api(client.ApiClient(kube.api_client.configuration))
    try:
        connection: Any = stream(
            core.connect_get_namespaced_pod_exec,
            pod,
            kube.namespace,
            command=[path],
            container=container,
            stdin=True,
            stdout=True,
            stderr=True,
            tty=False,
            _preload_content=False,
            _request_timeout=timeout,
        )
    except ApiException as error:
        raise RunnerError(f"exec into the sandbox failed: {error.status} {error.reason}") from error
    except Exception as error:  # websocket and socket errors come in many classes
        raise RunnerError(f"exec into the sandbox failed: {error}") from error
    try:
        connection.write_stdin(json.dumps(request) + "\n")
        connection.run_forever(timeout=timeout)
        output = connection.read_stdout(timeout=0) if connection.peek_stdout() else ""
    except Exception as error:
        raise RunnerError(f"the runner did not answer: {error}") from error
    finally:
        connection.close()
    try:
        answer: Json = json.loads(output.strip().splitlines()[-1])
    except (ValueError, IndexError) as error:
        raise RunnerError(
            "the runner did not answer with JSON (is the pool's runner path right?)"
        ) from error
    return answer
