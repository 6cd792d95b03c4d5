"""A real S3-compatible object store (MinIO) on loopback, for the diagnostics tests and the demo.

What lessor stores in S3 depends on what a real server enforces: signatures, server-side
encryption, presigned URLs that stop working when they expire. A fake would have to reimplement
exactly those checks, so the tests run MinIO itself. Like the control plane's binaries
(binaries.py) it is built from its pinned Go module, since no registry is reachable where this
project is developed and tested, and kept in the cache outside the repository, keyed by version.

Found while setting this up (MinIO v0.0.0-20260212201848-7aac2a2c5b7c, go 1.26, two cores):

- `go install github.com/minio/minio@<version>` works: its go.mod has no replace directives, so
  unlike Kubernetes and etcd it needs no wrapper module. A first build, downloading about 160
  modules, took a minute and a half; the binary is about 110 MB even stripped.
- SSE-S3 (`ServerSideEncryption="AES256"`) needs a KMS. MINIO_KMS_SECRET_KEY
  (`<key name>:<base64 of 32 bytes>`) is MinIO's built-in single-key KMS, enough for that.
- MinIO creates `~/.minio` and `~/.minio/certs` unless `--config-dir` (deprecated and hidden)
  and `--certs-dir` name other directories, so the server is given both inside its own directory
  and leaves the home directory alone.
- It binds the port of a PortReservation held by this process (Go sets SO_REUSEADDR), so the port
  is reserved as for the control plane's components. Given `--address 127.0.0.1:<port>` it also
  listens on `[::1]:<port>`. With MINIO_BROWSER=off it opens no console port at all.
- A single-drive server answers `/minio/health/ready` about 0.3 s after it starts.
- Presigned URLs: MinIO enforces their expiry (403 AccessDenied, "Request has expired") and
  accepts any ExpiresIn up to 7 days. Expiry counts from X-Amz-Date, which has whole seconds, so
  a URL stops working between ExpiresIn - 1 and ExpiresIn seconds after it was signed: ExpiresIn=0
  is accepted but dead at once, and ExpiresIn=1 may last a few milliseconds. Tests that download
  before the expiry should give 2 s or more.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import time
import urllib.error
import urllib.request
from importlib import resources
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

import boto3
from botocore.config import Config

from lessor.bucket import ACCESS_KEY_ID, SECRET_ACCESS_KEY
from lessor.controlplane.binaries import Progress, build_once, cache_root, run_go
from lessor.controlplane.errors import ControlPlaneError
from lessor.controlplane.ports import LOOPBACK, PortReservation
from lessor.controlplane.processes import ProcessRecord, spawn, terminate

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

MINIO_MODULE = "github.com/minio/minio"
REGION = "us-east-1"


def minio_version() -> str:
    """The pinned MinIO module version, from versions.json beside the control plane's pins."""
    text = resources.files("lessor.controlplane").joinpath("versions.json").read_text()
    return str(json.loads(text)["minio"])


def minio_dir(version: str | None = None) -> Path:
    return cache_root() / f"minio-{version or minio_version()}"


def find_minio(version: str | None = None) -> Path | None:
    """The cached minio binary if it is there, else None."""
    binary = minio_dir(version) / "minio"
    return binary if binary.is_file() else None


def ensure_minio(progress: Progress = print) -> Path:
    """Return the path of the pinned minio binary, building it first if it is not cached."""
    version = minio_version()

    def build(go: str, work: Path, out: Path) -> None:
        # `go install` has no -o: GOBIN says where the binary goes.
        install = ["install", "-trimpath", "-ldflags=-s -w", f"{MINIO_MODULE}@{version}"]
        run_go(go, install, work, progress, env={"GOBIN": str(out)})

    directory = build_once(
        minio_dir(version),
        lambda: find_minio(version) is not None,
        build,
        what=f"MinIO {version}",
        missing_go=(
            "the Go toolchain (go 1.24 or newer) is needed to build MinIO, the object store of "
            "the diagnostics tests and the demo, but `go` is not on PATH; install Go"
        ),
        progress=progress,
    )
    return directory / "minio"


class MinioServer:
    """MinIO serving one drive under `directory` on 127.0.0.1, for the life of a `with` block.

    The credentials are random for each server, and so is the key of its KMS; data, log and
    certificate directory stay in `directory` (kept after the server stops, like a control
    plane's files). The server is tied to this process's life: if the tests die, so does MinIO.
    """

    def __init__(
        self,
        directory: Path,
        *,
        binary: Path | None = None,
        host: str = LOOPBACK,
        timeout: float = 60.0,
        progress: Progress = print,
    ) -> None:
        self.directory = directory
        # The address it listens on and is reached at: loopback, or one that pods in a kind
        # cluster reach this machine by (its Docker network's gateway), for e2e/.
        self.host = host
        self.access_key = f"lessor-{secrets.token_hex(8)}"
        self.secret_key = secrets.token_hex(20)
        self._binary = binary
        self._timeout = timeout
        self._progress = progress
        self._port: int | None = None
        self._record: ProcessRecord | None = None

    @property
    def endpoint(self) -> str:
        if self._port is None:
            raise ControlPlaneError(f"MinIO in {self.directory} is not running")
        return f"http://{self.host}:{self._port}"

    @property
    def log_path(self) -> Path:
        return self.directory / "minio.log"

    def start(self) -> None:
        """Start MinIO and return once it is ready; a failed start stops it and raises with the
        tail of its log."""
        if self._record is not None:
            raise ControlPlaneError(f"MinIO in {self.directory} is running already")
        binary = self._binary or ensure_minio(self._progress)
        self.directory.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        with PortReservation() as reservation:
            self._port, console = reservation.take(), reservation.take()
            argv = [
                str(binary),
                "server",
                str(self.directory / "data"),
                "--address",
                f"{self.host}:{self._port}",
                "--console-address",
                f"{LOOPBACK}:{console}",
                "--certs-dir",
                str(self.directory / "certs"),
                "--config-dir",  # hidden and deprecated, yet created in $HOME unless given
                str(self.directory / "config"),
                "--quiet",
            ]
            # Nothing inherited configures it (MINIO_VOLUMES, MINIO_CONFIG_ENV_FILE of a shell).
            inherited = {k: v for k, v in os.environ.items() if not k.startswith("MINIO_")}
            environment = {**inherited, **self._server_environment()}
            self._record = spawn("minio", argv, self.log_path, detached=False, env=environment)
            try:
                self._wait_ready(started + self._timeout)
            except BaseException:
                self.stop()
                raise
        self._progress(f"MinIO serves on {self.endpoint} ({time.monotonic() - started:.1f}s)")

    def _server_environment(self) -> dict[str, str]:
        kms_key = base64.b64encode(secrets.token_bytes(32)).decode()
        return {
            "MINIO_ROOT_USER": self.access_key,
            "MINIO_ROOT_PASSWORD": self.secret_key,
            # MinIO's built-in KMS with one key: what SSE-S3 (AES256) needs to encrypt objects.
            "MINIO_KMS_SECRET_KEY": f"lessor-test:{kms_key}",
            "MINIO_BROWSER": "off",
            "MINIO_UPDATE": "off",
            "MINIO_CALLHOME_ENABLE": "off",
            # MinIO's mode for CI: a buffer pool of at most 256 MiB, not up to half the memory.
            "MINIO_CI_CD": "on",
        }

    def _wait_ready(self, deadline: float) -> None:
        url = f"{self.endpoint}/minio/health/ready"
        # This machine's own address never goes through a proxy, whatever the environment says.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        while True:
            if self._record is not None and not self._record.is_running():
                raise ControlPlaneError(f"MinIO exited while starting:\n{self._log_tail()}")
            try:
                with opener.open(url, timeout=2) as response:
                    if response.status == 200:
                        return
            except (OSError, urllib.error.HTTPError):
                pass
            if time.monotonic() >= deadline:
                raise ControlPlaneError(
                    f"MinIO did not become ready within {self._timeout:.0f}s:\n{self._log_tail()}"
                )
            time.sleep(0.1)

    def _log_tail(self, lines: int = 30) -> str:
        if not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        """Stop MinIO (SIGTERM, then SIGKILL after a grace period); keeps its files."""
        if self._record is not None:
            terminate(self._record, grace=10.0)
        self._record = None
        self._port = None

    def client(self) -> S3Client:
        """An S3 client with the root credentials, path-style as MinIO on an IP address needs."""
        client: S3Client = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=REGION,
            config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
        )
        return client

    def credential_literals(self) -> list[str]:
        """`kubectl create secret generic` arguments of a Secret lessor reads these credentials
        from (a pool's `diagnostics.credentialsSecretRef`)."""
        return [
            f"--from-literal={ACCESS_KEY_ID}={self.access_key}",
            f"--from-literal={SECRET_ACCESS_KEY}={self.secret_key}",
        ]

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def __enter__(self) -> MinioServer:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()
