"""The operator's test environment, shared by the modules that run it against the control plane
(test_operator, test_conditions, test_pool_adaptation, test_lease_credentials): the CRDs
installed once per module, and per test a namespace of its own whose operators are SIGKILLed and
`local` clusters destroyed at the end; and the identity provider the login tests share."""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from lessor.controlplane.kubectl import Cluster, wait_established
from tests.identity.hydra import Hydra, IdentityProvider
from tests.identity.login_consent import LoginConsent
from tests.integration.operator_harness import Objects, Operator, destroy_local_clusters

CRDS = Path(__file__).resolve().parents[2] / "crds"


@pytest.fixture(scope="module")
def cluster(control_plane: Cluster) -> Cluster:
    control_plane.kubectl("apply", "-f", str(CRDS))
    wait_established(control_plane)
    return control_plane


@pytest.fixture
def env(cluster: Cluster, tmp_path: Path) -> Iterator[tuple[Objects, list[Operator]]]:
    namespace = f"op-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", namespace)
    started: list[Operator] = []
    yield Objects(cluster, namespace), started
    for operator in started:
        if operator.process and operator.process.poll() is None:
            operator.kill(signal.SIGKILL)
    destroy_local_clusters(tmp_path / "instances")
    cluster.kubectl("delete", "namespace", namespace, "--wait=false")


@pytest.fixture(scope="session")
def identity_provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IdentityProvider]:
    """ORY Hydra and the login-and-consent app in front of it, one for the whole session: the
    tests that log in to a real provider share it (each registers clients of its own)."""
    app = LoginConsent("")
    pages = app.serve()
    hydra = Hydra.start(
        tmp_path_factory.mktemp("hydra"), f"http://127.0.0.1:{pages.server_address[1]}"
    )
    app.hydra_admin = hydra.admin
    try:
        yield IdentityProvider(hydra, app)
    finally:
        hydra.stop()
        pages.shutdown()
