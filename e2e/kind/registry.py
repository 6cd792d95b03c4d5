"""A real OCI registry for the kind e2e: `python -m e2e.kind.registry build|check [cluster]`.

Everything the kind scenarios run reaches the node by `kind load` (e2e/kind/cluster.py), which
skips what a cluster really does to get an image: resolve a name at a registry, over TLS, with
the credentials of a pull secret. This module serves one registry for the whole session so the
scenarios can do that too: push an image or a chart from this machine, pull it on the node.

The registry is distribution's (`github.com/distribution/distribution/v3/cmd/registry`, the
reference implementation of the OCI distribution spec, what the `registry` image runs), built
with `go install` from its Go module at the version `distribution` pins in versions.json (no
replace directives in its go.mod), cached in `~/.cache/lessor/kind/bin/distribution-<version>/`
like the node's components. v3.0.0 is pinned: the proxy also serves v3.1.2, but its go.mod
asks for go 1.26, above the go 1.25 this project asks of a machine. Measured on two cores (go
1.26.8): a fresh build, Go module and build caches empty, 2 min 39 s (much of it the modules of
the cloud storage drivers it links: Azure, GCS, S3); with those caches warm 4 s; finding it
cached 2 ms.

It runs as a process of this machine, not as a container on the `kind` docker network: it needs
no image of its own (none could be pulled, and building one would be one more build to keep),
its command line names its configuration under the session's work directory, so the session's
watchdog (lessor.controlplane.watchdog) stops it when the session dies however it ends, and it
is stopped with the session's other cleanup steps. It listens on one address only, the `kind`
network's gateway (172.18.0.1 here): the node reaches this machine there, and so does this
machine's docker (the gateway is a local address), so the name an image is pushed under is the
name the node pulls, and it is not exposed on the machine's other interfaces. Its certificate
names that address alone: on 127.0.0.1 it does not listen, and docker would not prove anything
there, since it counts 127.0.0.0/8 as an insecure registry and does not check certificates for
it. The port is picked and held (SO_REUSEADDR, not listening) until the registry listens on it,
as lessor.controlplane.ports holds loopback ports.

Its TLS comes from a CA made for the session (ECDSA P-256, `cryptography`), and it refuses
every request without the session's credentials: htpasswd authentication, the one entry a
bcrypt hash (distribution accepts only bcrypt; made with the `bcrypt` package, the `test`
extra's), of a random password that is never printed. It is trusted without `kind load` or any
restart: containerd on the node reads `/etc/containerd/certs.d/<host:port>/hosts.toml` (the
node image sets `config_path`, e2e/kind/node_image.py), docker here reads
`/etc/docker/certs.d/<host:port>/ca.crt` on each request (removed at `stop`, and when a run that
was killed left it, at the next `start`), and docker and helm log in with configuration
directories of the session, never the user's ~/.docker or ~/.config/helm.

In a session, once its kind cluster is up: `registry = start(work)`, `registry.stop` among the
cleanup steps, `registry.trust(cluster)`; then `push_image`, `push_chart` (another helm installs
from it with `helm_flags()`), `pull_secret` for the pods, and `wait_pulled` to wait for their
images, which fails at once with the node's own error when a pull is refused, where a rollout
would only time out; `assert_wrong_secret_is_refused` is the negative test.

Measured with `python -m e2e.kind.registry check` on a kind cluster of its own (two cores): the
registry answers 0.3 s after it starts (0.9 s with docker's and helm's logins); pushing
`lessor:dev` (500 MB, 176 MB compressed) took 19 to 30 s; the node pulled it in 9.5 s (0.15 s
when its layers were on the node already: `Always` still resolves the tag at the registry, with
the pull secret); a Deployment whose pull secret has a wrong password was refused (ErrImagePull,
401 Unauthorized) 2 to 4 s after it was applied; `helm push` of lessor's chart 1 to 2 s.
"""

from __future__ import annotations

import base64
import datetime
import io
import ipaddress
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import bcrypt
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from e2e.kind import cluster as kind_cluster
from e2e.kind.cluster import KindCluster, node_containers
from e2e.kind.components import cached, go_install, kind_cache
from e2e.kind.docker_setup import exit_code
from e2e.kind.lessor_image import say
from e2e.kind.node_image import CERTS_D as NODE_CERTS
from e2e.kind.node_image import image_id
from lessor.controlplane.binaries import Progress
from lessor.controlplane.errors import ControlPlaneError
from lessor.controlplane.helm import ensure_helm
from lessor.controlplane.watchdog import watch_over

MODULE = "github.com/distribution/distribution/v3"
COMMAND = f"{MODULE}/cmd/registry"
USERNAME = "lessor-e2e"
KIND_NETWORK = "kind"
DOCKER_CERTS = Path("/etc/docker/certs.d")
# In each /etc/docker/certs.d/<host:port> this module writes: the pid of the process that
# started the registry, so a later start can remove what a killed run left.
OWNER_FILE = "lessor-registry.pid"
START_TIMEOUT = 30.0
# Why a container's image is not there: the kubelet's waiting reasons for a pull that failed.
PULL_FAILURES = ("ErrImagePull", "ImagePullBackOff")
# How long a pull may keep failing before it is a failure (wait_pulled says why not at once).
PULL_PATIENCE = 30.0
Kubectl = Callable[..., subprocess.CompletedProcess[str]]


def pinned_version() -> str:
    data = json.loads(resources.files("e2e.kind").joinpath("versions.json").read_text())
    return str(data["distribution"])


def ensure_registry(progress: Progress = say) -> Path:
    """distribution's `registry` binary, built into the cache on first use."""
    version = pinned_version()

    def build(go: str, work: Path, out: Path) -> None:
        # What distribution's Makefile stamps, so `registry --version` names the pin.
        ldflags = f"-s -w -X {MODULE}/version.version={version}"
        go_install(go, [f"{COMMAND}@{version}"], out, progress, ldflags)

    return cached(f"distribution-{version}", ("registry",), build, progress) / "registry"


def kind_gateway() -> str:
    """The IPv4 gateway of the `kind` docker network: this machine, as the node reaches it."""
    result = subprocess.run(
        ["docker", "network", "inspect", KIND_NETWORK, "--format", "{{json .IPAM.Config}}"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if result.returncode != 0:
        raise ControlPlaneError(
            f"the `{KIND_NETWORK}` docker network is missing ({result.stderr.strip()}): the "
            "registry listens on its gateway, so start it after a kind cluster is up"
        )
    for subnet in json.loads(result.stdout) or []:
        gateway = subnet.get("Gateway", "")
        if gateway and ipaddress.ip_address(gateway).version == 4:
            return str(gateway)
    raise ControlPlaneError(f"the `{KIND_NETWORK}` docker network has no IPv4 gateway")


@dataclass(frozen=True)
class Pki:
    """A CA of the session and the registry's certificate from it, PEM encoded."""

    ca: bytes
    certificate: bytes
    key: bytes


def make_pki(address: str) -> Pki:
    """A CA and a server certificate for `address` (an IP), valid for two days: a session's."""
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=2)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "lessor e2e registry CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    server = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, address)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(address))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return Pki(
        ca=ca.public_bytes(serialization.Encoding.PEM),
        certificate=server.public_bytes(serialization.Encoding.PEM),
        key=key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )


def hold_port(host: str) -> socket.socket:
    """A port of `host` nobody else is handed until the registry listens on it (Go sets
    SO_REUSEADDR too, so it may bind it while this socket holds it without listening)."""
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind((host, 0))
    return holder


def forget_docker_trust_of_dead_runs() -> None:
    """Remove the /etc/docker/certs.d entries of registries whose run is gone (killed before it
    could remove them): each would trust a CA nobody holds the key of any more."""
    if not DOCKER_CERTS.is_dir():
        return
    for owner in DOCKER_CERTS.glob(f"*/{OWNER_FILE}"):
        pid = owner.read_text().strip()
        if not (pid.isdigit() and Path(f"/proc/{pid}").exists()):
            shutil.rmtree(owner.parent, ignore_errors=True)


def private_file(path: Path, content: bytes) -> Path:
    """A file only this user may read: credentials, keys."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(content)
    return path


def registry_config(directory: Path, address: str) -> dict[str, Any]:
    return {
        "version": 0.1,
        "log": {"level": "info", "formatter": "text"},
        "storage": {
            "filesystem": {"rootdirectory": str(directory / "storage")},
            "delete": {"enabled": True},
            "cache": {"blobdescriptor": "inmemory"},
        },
        "http": {
            "addr": address,
            # Signs the upload state it hands clients; random, as nothing outlives the session.
            "secret": secrets.token_urlsafe(32),
            "tls": {
                "certificate": str(directory / "tls" / "registry.crt"),
                "key": str(directory / "tls" / "registry.key"),
                "minimumtls": "tls1.2",
            },
            "headers": {"X-Content-Type-Options": ["nosniff"]},
        },
        "auth": {"htpasswd": {"realm": "lessor-e2e-registry", "path": str(directory / "htpasswd")}},
    }


class ImagePullError(AssertionError):
    """The node could not pull a container's image (ErrImagePull, ImagePullBackOff)."""


@dataclass
class Registry:
    """The session's registry, and what pushes to it and pulls from it.

    `address` is `<kind gateway>:<port>`: the host part of every reference it serves.
    """

    address: str
    directory: Path
    password: str = field(repr=False)
    process: subprocess.Popen[bytes]
    log: Path
    helm: Path
    username: str = USERNAME
    stopped: bool = field(default=False, repr=False)

    @property
    def ca_file(self) -> Path:
        return self.directory / "tls" / "ca.crt"

    @property
    def docker_config(self) -> Path:
        """DOCKER_CONFIG of the session: `docker login` writes its credentials here."""
        return self.directory / "docker-config"

    @property
    def helm_home(self) -> Path:
        return self.directory / "helm"

    @property
    def helm_registry_config(self) -> Path:
        """Where `helm registry login` keeps the credentials (helm's --registry-config)."""
        return self.helm_home / "config" / "registry" / "config.json"

    def helm_flags(self) -> list[str]:
        """What another helm (e2e/kind/chart.py's, of its own home) passes to install a chart
        from here: these credentials and this CA."""
        return ["--registry-config", str(self.helm_registry_config), "--ca-file", str(self.ca_file)]

    # -- lifecycle --------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop the registry (its process group), remove docker's trust of it and the session's
        credentials and storage; what it logged stays beside them."""
        if self.stopped:
            return
        self.stopped = True
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=15)
        shutil.rmtree(DOCKER_CERTS / self.address, ignore_errors=True)
        for name in ("docker-config", "helm", "storage", "htpasswd", "tls"):
            path = self.directory / name
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)

    # -- the node ---------------------------------------------------------------------------

    def trust(self, cluster: KindCluster) -> None:
        """Make every node of `cluster` pull from here over verified TLS: the CA and a
        hosts.toml in containerd's certs.d, read on each pull (nothing is restarted). The
        credentials are not the node's: each pod brings them in its pull secret."""
        nodes = node_containers(cluster.name)
        if not nodes:
            raise ControlPlaneError(f"kind cluster {cluster.name} has no node container")
        directory = f"{NODE_CERTS}/{self.address}"
        hosts = (
            f'server = "https://{self.address}"\n'
            f'ca = "{directory}/ca.crt"\n'
            'capabilities = ["pull", "resolve"]\n'
        )
        files = {f"{directory}/ca.crt": self.ca_file.read_bytes(), f"{directory}/hosts.toml":
                 hosts.encode()}  # fmt: skip
        for node in nodes:
            check_config_path(node)
            subprocess.run(
                ["docker", "cp", "-", f"{node}:/"], input=tar_of(files), capture_output=True,
                check=True,
            )  # fmt: skip

    # -- pushes from this machine -----------------------------------------------------------

    def docker(self, *args: str, stdin: str | None = None) -> str:
        """docker with the session's configuration directory (its credentials)."""
        result = subprocess.run(
            ["docker", "--config", str(self.docker_config), *args],
            input=stdin, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if result.returncode != 0:
            raise ControlPlaneError(f"`docker {' '.join(args)}` failed: {result.stderr.strip()}")
        return result.stdout

    def push_image(self, local_tag: str, repository: str, tag: str) -> str:
        """Push a docker image of this machine as `<address>/<repository>:<tag>`; returns that
        reference, which the node pulls as it is."""
        reference = f"{self.address}/{repository}:{tag}"
        self.docker("tag", local_tag, reference)
        try:
            self.docker("push", reference)
        finally:
            # Only the name: the image stays under its own tag.
            subprocess.run(["docker", "rmi", reference], capture_output=True, check=False)
        return reference

    def helm_run(self, *args: str, stdin: str | None = None) -> str:
        """helm with its state under the registry's directory (not the user's home)."""
        home = self.helm_home
        env = {
            **os.environ,
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
            "HELM_REGISTRY_CONFIG": str(self.helm_registry_config),
        }
        result = subprocess.run(
            [str(self.helm), *args], input=stdin, env=env, capture_output=True, text=True,
            timeout=300, check=False,
        )  # fmt: skip
        if result.returncode != 0:
            raise ControlPlaneError(f"`helm {' '.join(args)}` failed: {result.stderr.strip()}")
        return result.stdout + result.stderr

    def push_chart(self, tgz: Path) -> str:
        """`helm push` of a packaged chart to `oci://<address>/charts`; returns the chart's
        reference with its version (`oci://<address>/charts/<name>:<version>`), which `helm
        install`, `helm pull` and `helm show` take as it is."""
        output = self.helm_run("push", str(tgz), f"oci://{self.address}/charts",
                               "--ca-file", str(self.ca_file))  # fmt: skip
        for line in output.splitlines():
            if line.startswith("Pushed:"):
                return f"oci://{line.removeprefix('Pushed:').strip()}"
        raise ControlPlaneError(f"`helm push` said nothing of what it pushed: {output.strip()}")

    # -- pull secrets -----------------------------------------------------------------------

    def pull_secret(
        self, kubectl: Kubectl, namespace: str, name: str, *, password: str | None = None
    ) -> None:
        """A `kubernetes.io/dockerconfigjson` Secret with the session's credentials (or with
        `password` instead), for a pod's imagePullSecrets. Applied from stdin: the password is
        on no command line."""
        secret = password if password is not None else self.password
        auth = base64.b64encode(f"{self.username}:{secret}".encode()).decode()
        config = {"auths": {self.address: {"username": self.username, "password": secret,
                                           "auth": auth}}}  # fmt: skip
        document = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "type": "kubernetes.io/dockerconfigjson",
            "data": {".dockerconfigjson": base64.b64encode(json.dumps(config).encode()).decode()},
        }
        kubectl("apply", "-f", "-", input=json.dumps(document))

    def wrong_pull_secret(self, kubectl: Kubectl, namespace: str, name: str) -> None:
        """A pull secret of the right user with a wrong password, for the negative test."""
        self.pull_secret(kubectl, namespace, name, password=secrets.token_urlsafe(24))


def tar_of(files: dict[str, bytes]) -> bytes:
    """A tar of `files` (absolute paths) and their directories, for `docker cp - node:/`."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        directories = sorted({str(Path(path).parent).lstrip("/") for path in files})
        for directory in directories:
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            archive.addfile(info)
        for path, content in files.items():
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode = len(content), 0o644
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def check_config_path(node: str) -> None:
    """containerd on the node must read registry hosts from NODE_CERTS (the node image sets
    it; kind's own config does not): without it hosts.toml is ignored, and a pull fails with
    a certificate error that would look like the registry's fault."""
    dumped = subprocess.run(
        ["docker", "exec", node, "containerd", "config", "dump"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    cri = tomllib.loads(dumped).get("plugins", {}).get("io.containerd.grpc.v1.cri", {})
    configured = cri.get("registry", {}).get("config_path", "")
    if configured != NODE_CERTS:
        raise ControlPlaneError(
            f"containerd on node {node[:12]} reads registry hosts from {configured!r}, not "
            f"{NODE_CERTS!r}: the node image predates config_path (e2e/kind/node_image.py); "
            "delete the cluster so it is made again from the image built now"
        )


def write_files(directory: Path, address: str) -> tuple[Path, str]:
    """The registry's CA, certificate and key, its htpasswd of a new random password and its
    configuration, under `directory`; returns the configuration's path and the password."""
    pki = make_pki(address.rsplit(":", 1)[0])
    (directory / "tls").mkdir(mode=0o700)
    (directory / "tls" / "ca.crt").write_bytes(pki.ca)
    (directory / "tls" / "registry.crt").write_bytes(pki.certificate)
    private_file(directory / "tls" / "registry.key", pki.key)
    password = secrets.token_urlsafe(24)
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=10))
    private_file(directory / "htpasswd", f"{USERNAME}:".encode() + hashed + b"\n")
    config = directory / "config.yml"
    private_file(config, yaml.safe_dump(registry_config(directory, address)).encode())
    return config, password


def start(work: Path, progress: Progress = say) -> Registry:
    """The session's registry under `work/registry`, answering over TLS on the kind network's
    gateway, its storage, keys and credentials there, and this machine's docker and helm
    logged in to it. Start it after a kind cluster is up (its network must exist) and put its
    `stop` among the session's cleanup steps; `trust` each cluster that pulls from it."""
    binary = ensure_registry(progress)
    helm = ensure_helm(progress)
    forget_docker_trust_of_dead_runs()
    directory = work / "registry"
    if directory.exists():
        raise ControlPlaneError(f"{directory} exists: one registry per work directory")
    directory.mkdir(parents=True)
    gateway = kind_gateway()
    with hold_port(gateway) as holder:
        address = f"{gateway}:{holder.getsockname()[1]}"
        config, password = write_files(directory, address)
        # REGISTRY_* variables would override the file; tracing would look for a collector.
        env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
        env["OTEL_TRACES_EXPORTER"] = "none"
        log = directory / "registry.log"
        started = time.monotonic()
        with log.open("ab") as output:
            # Its own process group, so `stop` ends all of it and a Ctrl-C at the terminal
            # does not end it before the session's cleanup has used it. The configuration's
            # path on its command line is what the session's watchdog looks for.
            process = subprocess.Popen(
                [str(binary), "serve", str(config)], stdout=output, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env=env, start_new_session=True,
            )  # fmt: skip
        registry = Registry(address, directory, password, process, log, helm)
        try:
            wait_answering(registry)
        except BaseException:
            registry.stop()
            raise
    progress(
        f"registry {pinned_version()} answers at https://{address} "
        f"({time.monotonic() - started:.1f}s after it started)"
    )
    try:
        trust_here(registry)
    except BaseException:
        registry.stop()
        raise
    return registry


def wait_answering(registry: Registry) -> None:
    """Until the registry answers: 401 without credentials, 200 with them, over TLS verified
    against the session's CA."""
    context = ssl.create_default_context(cafile=str(registry.ca_file))
    url = f"https://{registry.address}/v2/"
    token = base64.b64encode(f"{registry.username}:{registry.password}".encode()).decode()
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if registry.process.poll() is not None:
            tail = registry.log.read_text(errors="replace").strip().splitlines()[-5:]
            raise ControlPlaneError(f"the registry exited {registry.process.returncode}: "
                                    + "\n".join(tail))  # fmt: skip
        try:
            urllib.request.urlopen(url, context=context, timeout=2)
            raise ControlPlaneError(f"{url} answered without credentials: no authentication")
        except urllib.error.HTTPError as refused:
            if refused.code != 401:
                raise ControlPlaneError(
                    f"{url} answered {refused.code} without credentials"
                ) from None
            break
        except OSError:
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"the registry did not answer at {url} within {START_TIMEOUT:.0f}s "
                    f"(log: {registry.log})"
                ) from None
            time.sleep(0.1)
    request = urllib.request.Request(url, headers={"Authorization": f"Basic {token}"})
    with urllib.request.urlopen(request, context=context, timeout=5) as answer:  # noqa: S310
        if answer.status != 200:
            raise ControlPlaneError(f"{url} answered {answer.status} with the credentials")


def trust_here(registry: Registry) -> None:
    """This machine's docker and helm trust the CA and hold the credentials (their own
    configuration directories; docker's CA, which only its daemon reads, in /etc/docker)."""
    certs = DOCKER_CERTS / registry.address
    certs.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(registry.ca_file, certs / "ca.crt")
    (certs / OWNER_FILE).write_text(f"{os.getpid()}\n")
    registry.docker_config.mkdir(mode=0o700)
    registry.docker(
        "login", "--username", registry.username, "--password-stdin", registry.address,
        stdin=registry.password,
    )  # fmt: skip
    registry.helm_run(
        "registry", "login", registry.address, "--username", registry.username,
        "--password-stdin", "--ca-file", str(registry.ca_file), stdin=registry.password,
    )  # fmt: skip


# -- waiting for pulls ---------------------------------------------------------------------


def _events(kubectl: Kubectl, namespace: str, pod: str) -> list[str]:
    listed = kubectl(
        "get", "events", "-n", namespace, "-o", "json",
        "--field-selector", f"involvedObject.name={pod},type=Warning", check=False,
    )  # fmt: skip
    if listed.returncode != 0:
        return []
    items = json.loads(listed.stdout)["items"]
    return [f"{item.get('reason')}: {item.get('message', '').strip()}" for item in items]


def _pulled(container: dict[str, Any]) -> bool:
    """A container has its image once the runtime made it: it has an image ID and ran."""
    state = container.get("state", {})
    started = "running" in state or "terminated" in state or container.get("lastState")
    return bool(container.get("imageID")) and bool(started)


def wait_pulled(
    kubectl: Kubectl,
    namespace: str,
    selector: str,
    timeout: float = 120.0,
    patience: float = PULL_PATIENCE,
) -> list[str]:
    """Wait until every container of the pods `selector` selects (a Deployment's pods) has
    its image; returns the pods' names. A pull that keeps failing for `patience` seconds raises
    ImagePullError, naming the pod, the image, the kubelet's reason (ErrImagePull,
    ImagePullBackOff) and the node's error and events, where waiting for a rollout would only
    time out. Not at its first failure: a pod made a moment after its pull secret may be
    pulled without it once (the kubelet may read only the secrets of pods it already knows:
    `FailedToRetrieveImagePullSecret`, then a 401), and the kubelet's next try, about 10 s
    later, succeeds."""
    deadline = time.monotonic() + timeout
    last = "no pod yet"
    failing_since: dict[tuple[str, str], float] = {}
    while time.monotonic() < deadline:
        pods = json.loads(
            kubectl("get", "pods", "-n", namespace, "-l", selector, "-o", "json").stdout
        )["items"]
        waiting = []
        for pod in pods:
            name = pod["metadata"]["name"]
            status = pod.get("status", {})
            statuses = status.get("initContainerStatuses", []) + status.get("containerStatuses", [])
            for container in statuses:
                key = (name, container["name"])
                reason = container.get("state", {}).get("waiting", {}).get("reason", "")
                if reason not in PULL_FAILURES:
                    failing_since.pop(key, None)
                    continue
                since = failing_since.setdefault(key, time.monotonic())
                if time.monotonic() - since >= patience:
                    message = container["state"]["waiting"].get("message", "").strip()
                    events = "; ".join(_events(kubectl, namespace, name)) or "none"
                    raise ImagePullError(
                        f"pod {namespace}/{name}: container {container['name']} cannot pull "
                        f"{container.get('image')} (for {patience:.0f}s): {reason}: {message} "
                        f"(events: {events})"
                    )
            spec = pod.get("spec", {})
            wanted = len(spec.get("initContainers", [])) + len(spec.get("containers", []))
            done = [c for c in statuses if _pulled(c)]
            if len(done) < wanted:
                waiting.append(f"{name} ({len(done)}/{wanted} containers pulled)")
        if pods and not waiting:
            return [pod["metadata"]["name"] for pod in pods]
        last = ", ".join(waiting) or last
        time.sleep(0.5)
    raise AssertionError(
        f"timed out after {timeout:.0f}s waiting for the images of pods {selector} in "
        f"{namespace}: {last}"
    )


def deployment(name: str, namespace: str, image: str, secret: str) -> dict[str, Any]:
    """A Deployment of one pod of `image` pulled with `secret` each time it starts (`Always`:
    an image the node holds already is resolved at the registry again), its pod fit for Pod
    Security `restricted` so any namespace takes it."""
    labels = {"app.kubernetes.io/name": name}
    container = {
        "name": "main",
        "image": image,
        "imagePullPolicy": "Always",
        "command": ["python3", "-c", "import time; time.sleep(3600)"],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
            "runAsUser": 65532,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "imagePullSecrets": [{"name": secret}],
                    "terminationGracePeriodSeconds": 1,
                    "containers": [container],
                },
            },
        },
    }


def assert_wrong_secret_is_refused(
    registry: Registry, kubectl: Kubectl, namespace: str, image: str, timeout: float = 90.0
) -> str:
    """A Deployment of `image` (pushed to `registry`) whose pull secret has a wrong password
    must not get its image: the node's pull is refused by the registry (401), and wait_pulled
    says so (ErrImagePull or ImagePullBackOff) well within `timeout`. Returns its message."""
    name = "lessor-registry-wrong-secret"
    registry.wrong_pull_secret(kubectl, namespace, name)
    try:
        kubectl("apply", "-f", "-", input=json.dumps(deployment(name, namespace, image, name)))
        try:
            wait_pulled(kubectl, namespace, f"app.kubernetes.io/name={name}", timeout)
        except ImagePullError as refused:
            message = str(refused)
            if "401" not in message and "unauthorized" not in message.lower():
                raise AssertionError(
                    f"the pull failed, but not for the wrong password: {message}"
                ) from None
            return message
        raise AssertionError(f"the node pulled {image} with a wrong password in its pull secret")
    finally:
        kubectl("delete", "deployment", name, "-n", namespace, "--ignore-not-found",
                "--wait=false", check=False)  # fmt: skip
        kubectl("delete", "secret", name, "-n", namespace, "--ignore-not-found", check=False)


# -- the check: `python -m e2e.kind.registry check [cluster]` -----------------------------


CHECK_NAMESPACE = "lessor-registry-check"
CHECK_IMAGES = ("lessor:dev", "lessor-sandbox:dev")


def _pull_time(kubectl: Kubectl, namespace: str, pod: str) -> str:
    """The kubelet's own account of the pull ("Successfully pulled image ... in 9.1s ...")."""
    listed = kubectl(
        "get", "events", "-n", namespace, "-o", "json",
        "--field-selector", f"involvedObject.name={pod},reason=Pulled",
    )  # fmt: skip
    messages = [item.get("message", "") for item in json.loads(listed.stdout)["items"]]
    return messages[-1] if messages else "no Pulled event"


def local_image() -> str:
    """An image of this machine to push: lessor's own when it is built."""
    for tag in CHECK_IMAGES:
        if image_id(tag) is not None:
            return tag
    raise ControlPlaneError(f"none of {CHECK_IMAGES} is built: python -m e2e.kind.prepare")


def check_image(registry: Registry, kubectl: Kubectl, image: str) -> None:
    """Push `image`, run it on the node with a pull secret, see a wrong secret refused."""
    started = time.monotonic()
    reference = registry.push_image(image, "lessor/check", "v1")
    say(f"pushed {image} as {reference} in {time.monotonic() - started:.1f}s")
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": CHECK_NAMESPACE}}
    kubectl("apply", "-f", "-", input=json.dumps(namespace))
    registry.pull_secret(kubectl, CHECK_NAMESPACE, "registry")
    started = time.monotonic()
    pulling = deployment("registry-pull", CHECK_NAMESPACE, reference, "registry")
    kubectl("apply", "-f", "-", input=json.dumps(pulling))
    [pod] = wait_pulled(kubectl, CHECK_NAMESPACE, "app.kubernetes.io/name=registry-pull")
    kubectl(
        "wait", "-n", CHECK_NAMESPACE, "--for=jsonpath={.status.phase}=Running", f"pod/{pod}",
        "--timeout=120s",
    )  # fmt: skip
    say(
        f"pod {pod} Running from {reference} after {time.monotonic() - started:.1f}s; "
        f"kubelet: {_pull_time(kubectl, CHECK_NAMESPACE, pod)}"
    )
    started = time.monotonic()
    refused = assert_wrong_secret_is_refused(registry, kubectl, CHECK_NAMESPACE, reference)
    say(f"a wrong pull secret was refused after {time.monotonic() - started:.1f}s: {refused}")


def check_chart(registry: Registry, scratch: Path) -> None:
    """`helm package` lessor's chart, push it, and read it back with `helm show` and `helm
    pull`: the same archive."""
    root = Path(__file__).resolve().parents[2]
    packaged = registry.helm_run("package", str(root / "charts" / "lessor"), "-d", str(scratch))
    tgz = Path(packaged.strip().rsplit(": ", 1)[1])
    started = time.monotonic()
    chart = registry.push_chart(tgz)
    say(f"pushed {tgz.name} as {chart} in {time.monotonic() - started:.1f}s")
    ca = ["--ca-file", str(registry.ca_file)]
    shown = yaml.safe_load(registry.helm_run("show", "chart", chart, *ca))
    pulled = scratch / "pulled"
    pulled.mkdir()
    registry.helm_run("pull", chart, *ca, "-d", str(pulled))
    [back] = pulled.iterdir()
    if back.read_bytes() != tgz.read_bytes():
        raise AssertionError(f"helm pull of {chart} gave another archive than was pushed")
    say(
        f"helm show chart {chart}: {shown['name']} {shown['version']}; helm pull gave back "
        f"the same {back.name}"
    )


def check(name: str) -> None:
    """Prove the registry on a kind cluster `name` (created unless it runs): push an image,
    pull it on the node with a pull secret, see a wrong secret refused, push and read back a
    chart."""
    cluster = kind_cluster.up(name, progress=say)
    kubectl = cluster.run

    image = local_image()
    scratch = kind_cache() / "registry-check"
    scratch.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="run-", dir=scratch))
    watch_over(work)  # a check killed midway leaves no registry running
    started = time.monotonic()
    registry = start(work)
    say(f"started in {time.monotonic() - started:.1f}s (with the build lookups and logins)")
    passed = False
    try:
        registry.trust(cluster)
        say(f"the node of {name} trusts https://{registry.address} (hosts.toml and the CA)")
        check_image(registry, kubectl, image)
        charts = work / "charts"
        charts.mkdir()
        check_chart(registry, charts)
        passed = True
    finally:
        kubectl(
            "delete", "namespace", CHECK_NAMESPACE, "--ignore-not-found", "--wait=false",
            check=False,
        )  # fmt: skip
        registry.stop()
        if passed:
            shutil.rmtree(work)
            say("registry stopped; the check passed")
        else:
            say(f"registry stopped; its log: {registry.log}")


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "build"
    if command == "build" and len(argv) <= 1:
        return exit_code("registry", lambda: say(str(ensure_registry(say))))
    if command == "check" and len(argv) <= 2:
        name = argv[1] if len(argv) > 1 else "lessor-registry-probe"
        return exit_code("registry check", lambda: check(name))
    print("usage: python -m e2e.kind.registry build | check [kind cluster]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
