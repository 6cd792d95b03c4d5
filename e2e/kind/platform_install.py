"""lessor installed in kind the way a platform team installs it: docs/install.md, run.

Nothing reaches the node by `kind load` here. The release is built as a release is
(`release.build`: the wheel, the image's OCI archive, the packaged chart), and docs/install.md's
blocks push the image and the chart to the session's registry (e2e/kind/registry.py: TLS with
its own CA, htpasswd) and install from there: the node pulls the image with a pull secret, Helm
takes the chart from `oci://`. Before that, the previous release's chart (kept in releases/, as
it was published) is installed as 0.1's docs said and upgraded by the doc's "From 0.1" block,
then uninstalled, so that the install the scenarios run on is the doc's fresh one.

The doc's shell is the reader's: kubectl, helm, docker and python3 on PATH, the kind cluster as
KUBECONFIG, and a home of its own (docker's and Helm's logins, the CLI's configuration), so
nothing of this machine's user is read or written. The registry's CA is trusted the way the doc
says a private CA is: docker by /etc/docker/certs.d (the registry module does that), Helm by
SSL_CERT_FILE (the system's roots and the CA), the node by containerd's hosts.toml.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import sys
from dataclasses import dataclass
from pathlib import Path

from e2e.kind import chart, install_doc
from e2e.kind.cluster import KindCluster
from e2e.kind.components import kind_cache
from e2e.kind.registry import Kubectl, Registry, wait_pulled
from lessor import __version__
from lessor.controlplane.binaries import Progress
from lessor.controlplane.helm import ensure_helm
from release import build as release_build

RELEASES = Path(__file__).resolve().parent / "releases"
PREVIOUS = "0.1.0"
NAMESPACE = "lessor-system"
PULL_SECRET_NAME = "lessor-pull"  # noqa: S105 (a name, what docs/install.md calls it)
COMPONENTS = ("lessor-operator", "lessor-apiserver")


def release_dist() -> Path:
    """Where the kind e2e builds the release (`python -m e2e.kind.prepare`), outside the
    clone like every other build of the suite: the image's archive is 180 MB."""
    return kind_cache() / "release"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _ca_bundle(registry: Registry, directory: Path) -> Path:
    """The system's roots and the registry's CA in one file, for SSL_CERT_FILE: Helm (Go) and
    pip (PyPI) read their roots from it."""
    system = ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt"
    bundle = directory / "ca-bundle.crt"
    bundle.write_text(Path(system).read_text() + registry.ca_file.read_text())
    return bundle


@dataclass(frozen=True)
class PlatformInstall:
    """The reader's working directory (dist/, the values file, the pulled chart), their shell's
    environment, and what of the doc names this machine."""

    cluster: KindCluster
    kubectl: Kubectl
    registry: Registry
    directory: Path
    env: dict[str, str]
    substitutions: list[install_doc.Substitution]
    helm_binary: Path

    def run(self, stage: str = install_doc.INSTALL) -> str:
        return install_doc.run(self.directory, self.env, self.substitutions, stage=stage)

    def helm(self, namespace: str = NAMESPACE) -> chart.Helm:
        """helm on the doc's release, its chart the one the doc pushed."""
        return chart.Helm(
            self.helm_binary, self.cluster.kubeconfig, self.directory / "helm-e2e",
            chart=f"oci://{self.registry.address}/charts/lessor", version=__version__,
            namespace=namespace, flags=tuple(self.registry.helm_flags()),
        )  # fmt: skip

    def upgrade_from_previous(self, progress: Progress) -> None:
        """The previous release installed as its docs said (`helm install` recorded in
        `default`; no pull-secret value then, so the secret is given to its ServiceAccounts),
        running, then the doc's "From 0.1" block, then uninstalled with its namespaces."""
        self.registry.push_image(f"lessor:{__version__}", "lessor", __version__)
        self.registry.push_chart(RELEASES / f"lessor-{PREVIOUS}.tgz")
        self.registry.push_chart(self.directory / "dist" / f"lessor-{__version__}.tgz")
        previous = self.helm(namespace="default")
        progress(f"installing lessor {PREVIOUS} from the registry, as its docs said")
        # No image of 0.1 was ever published: it runs this version's image, and what the
        # upgrade changes is the chart, its values and the CRDs.
        previous(
            "install", chart.RELEASE, previous.chart, "--version", PREVIOUS, *previous.flags,
            f"--set=image.repository={self.registry.address}/lessor",
            f"--set=image.tag={__version__}",
        )  # fmt: skip
        self.registry.pull_secret(self.kubectl, NAMESPACE, PULL_SECRET_NAME)
        patch = json.dumps({"imagePullSecrets": [{"name": PULL_SECRET_NAME}]})
        for account in COMPONENTS:
            self.kubectl("patch", "serviceaccount", account, "-n", NAMESPACE, "-p", patch)
        self.kubectl("delete", "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/name=lessor")
        wait_pulled(self.kubectl, NAMESPACE, "app.kubernetes.io/name=lessor", timeout=300)
        for deployment in COMPONENTS:
            self.kubectl("rollout", "status", f"deployment/{deployment}", "-n", NAMESPACE,
                         "--timeout=300s")  # fmt: skip
        progress(f"upgrading {PREVIOUS} to {__version__} (docs/install.md, From 0.1)")
        self.run("upgrade from 0.1")
        found = previous.release()
        if found != ("deployed", 2, f"lessor-{__version__}"):
            raise AssertionError(f"after the upgrade from {PREVIOUS} the release is {found}")
        previous("uninstall", chart.RELEASE, "--wait", "--timeout=300s")
        for namespace in (NAMESPACE, "lessor-sandboxes"):
            self.kubectl("wait", "--for=delete", f"namespace/{namespace}", "--timeout=300s")


def prepare(
    cluster: KindCluster, kubectl: Kubectl, registry: Registry, work: Path, progress: Progress
) -> PlatformInstall:
    """The release built into the reader's dist/, and their shell's environment."""
    directory = work / "platform-team"
    directory.mkdir(parents=True)
    release_build.build(release_dist(), progress)  # found as it is when prepare built it
    (directory / "dist").symlink_to(release_dist(), target_is_directory=True)
    home = directory / "home"
    home.mkdir()
    helm = ensure_helm(progress)
    tools = [cluster.kubectl.parent, helm.parent, Path(sys.executable).parent]
    port = _free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("LESSOR_", "KUBECONFIG"))},
        "PATH": os.pathsep.join([*map(str, tools), os.environ.get("PATH", "")]),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "DOCKER_CONFIG": str(home / ".docker"),
        "HELM_CACHE_HOME": str(home / ".cache" / "helm"),
        "HELM_CONFIG_HOME": str(home / ".config" / "helm"),
        "HELM_DATA_HOME": str(home / ".local" / "share" / "helm"),
        "KUBECONFIG": str(cluster.kubeconfig),
        "SSL_CERT_FILE": str(_ca_bundle(registry, directory)),
        # The CLI's dependencies from the wheels the image was built from, PyPI for the rest.
        "PIP_FIND_LINKS": str(kind_cache() / "wheelhouse"),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    substitutions = [
        install_doc.Substitution("registry.example.com", registry.address),
        install_doc.Substitution("platform-ci", registry.username),
        install_doc.Substitution("change-me", registry.password, secret=True),
        install_doc.Substitution("127.0.0.1:8000", f"127.0.0.1:{port}"),
        install_doc.Substitution("8000:80", f"{port}:80"),
    ]
    return PlatformInstall(cluster, kubectl, registry, directory, env, substitutions, helm)
