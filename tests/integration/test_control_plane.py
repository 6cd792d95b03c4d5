"""The local control plane is a real cluster: pods run on the kwok node, exec runs local commands,
and the API server is an OIDC issuer whose JWKS verifies the ServiceAccount tokens it mints."""

from __future__ import annotations

import json
import re
import socket
import ssl
import subprocess
import textwrap
import threading
import urllib.request
from pathlib import Path

import jwt
import pytest

from lessor.controlplane.cluster import FORWARDED_PORTS, NODE_NAME, LocalControlPlane
from lessor.controlplane.kubectl import Cluster

pytestmark = pytest.mark.integration


@pytest.fixture
def local(control_plane: Cluster) -> LocalControlPlane:
    if not isinstance(control_plane, LocalControlPlane):
        pytest.skip("exercises the local control plane's kwok node and loopback issuer")
    return control_plane


def test_fake_node_is_ready(local: LocalControlPlane) -> None:
    result = local.kubectl("get", "node", NODE_NAME, "-o", "json")
    node = json.loads(result.stdout)
    ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
    assert ready and ready[0]["status"] == "True"


def test_pod_runs_on_the_node_and_exec_runs_a_local_command(
    local: LocalControlPlane, tmp_path: Path
) -> None:
    marker = tmp_path / "marker.txt"
    marker.write_text("written by the test on the host\n")
    pod = textwrap.dedent(
        """
        apiVersion: v1
        kind: Pod
        metadata: {name: exec-probe, namespace: default}
        spec:
          containers:
          - {name: main, image: busybox}
        """
    )
    local.kubectl("apply", "-f", "-", input=pod)
    try:
        local.kubectl("wait", "--for=condition=Ready", "pod/exec-probe", "--timeout=60s")
        placed = local.kubectl("get", "pod", "exec-probe", "-o", "jsonpath={.spec.nodeName}")
        assert placed.stdout == NODE_NAME
        result = local.kubectl("exec", "exec-probe", "--", "cat", str(marker))
        assert result.stdout == "written by the test on the host\n"
        # kwok reports a local command's failure as an error carrying its exit status (a real
        # kubelet would hand the code itself to kubectl).
        failing = local.kubectl("exec", "exec-probe", "--", "sh", "-c", "exit 3", check=False)
        assert failing.returncode != 0
        assert "exit status 3" in failing.stderr
        # The kubelet's (CRI) log line format, which kwok parses like a real node would.
        stamp = "2026-01-01T00:00:00.000000000Z"
        local.pod_log.write_text(f"{stamp} stdout F line one\n{stamp} stderr F line two\n")
        logs = local.kubectl("logs", "exec-probe")
        assert logs.stdout == "line one\nline two\n"
    finally:
        local.kubectl("delete", "pod", "exec-probe", "--wait=false", "--grace-period=0")


def test_port_forward_reaches_a_local_server_on_the_pod_port(local: LocalControlPlane) -> None:
    pod_port = FORWARDED_PORTS[7]
    with socket.create_server(("127.0.0.1", local.forward_target(pod_port))) as server:

        def answer() -> None:
            connection, _ = server.accept()
            with connection:
                connection.sendall(b"hello through port-forward\n")

        threading.Thread(target=answer, daemon=True).start()
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "pf-probe", "namespace": "default"},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]},
        }
        local.kubectl("apply", "-f", "-", input=json.dumps(pod))
        local.kubectl("wait", "--for=condition=Ready", "pod/pf-probe", "--timeout=120s")
        state = local.state()
        assert state is not None
        # kubectl picks the local port itself and says which: nothing to race for.
        forward = subprocess.Popen(
            [
                f"{state.binaries}/kubectl",
                "--kubeconfig",
                str(local.kubeconfig),
                "port-forward",
                "pod/pf-probe",
                f":{pod_port}",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert forward.stdout is not None
            banner = forward.stdout.readline()
            found = re.match(rf"Forwarding from 127\.0\.0\.1:(\d+) -> {pod_port}", banner)
            assert found, banner
            with socket.create_connection(("127.0.0.1", int(found[1])), timeout=60) as client:
                received = client.makefile("rb").readline()
            assert received == b"hello through port-forward\n"
        finally:
            forward.terminate()
            forward.wait(timeout=60)
            local.kubectl("delete", "pod", "pf-probe", "--wait=false", "--grace-period=0")


def test_service_account_tokens_verify_against_the_issuers_public_jwks(
    local: LocalControlPlane,
) -> None:
    token = local.kubectl("create", "token", "default", "--audience", "lessor").stdout.strip()
    context = ssl.create_default_context(cafile=str(local.pki / "ca.crt"))
    # No client certificate: discovery must work for anyone, as an OIDC client would see it.
    discovery_url = f"{local.server}/.well-known/openid-configuration"
    with urllib.request.urlopen(discovery_url, context=context, timeout=10) as response:
        discovery = json.load(response)
    assert discovery["issuer"] == local.server
    with urllib.request.urlopen(discovery["jwks_uri"], context=context, timeout=10) as response:
        jwks = jwt.PyJWKSet.from_dict(json.load(response))
    kid = jwt.get_unverified_header(token)["kid"]
    key = next(k for k in jwks.keys if k.key_id == kid)
    claims = jwt.decode(token, key, algorithms=["RS256"], audience="lessor", issuer=local.server)
    assert claims["sub"] == "system:serviceaccount:default:default"
    with pytest.raises(jwt.InvalidAudienceError):
        jwt.decode(token, key, algorithms=["RS256"], audience="someone-else")
