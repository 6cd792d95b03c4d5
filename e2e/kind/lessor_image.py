"""The lessor image, built here: `python -m e2e.kind.lessor_image build`.

The project's Dockerfile builds on `python:3.12-slim` for users; no registry is reachable from
these machines, so its base (a build argument) is made from Debian packages (bookworm's python3
and its venv module, by mmdebstrap, imported into docker), and its Python dependencies, which
its build stage would fetch from PyPI, come from a wheel directory made with this machine's pip
and served to the build over loopback. The image is tagged `lessor:dev`, what
manifests/overlays/dev runs, and is rebuilt only when the package's sources or the base change.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from e2e.kind.components import KindVersions, kind_cache
from e2e.kind.docker_setup import DockerSetupError, ensure_docker
from e2e.kind.node_image import KEY_LABEL, docker, image_key, imported
from e2e.kind.rootfs import ensure_rootfs
from lessor.controlplane.binaries import Progress
from lessor.controlplane.errors import ControlPlaneError

ROOT = Path(__file__).resolve().parents[2]
TAG = "lessor:dev"
# bookworm's python3 is 3.11, as lessor needs; venv makes the image's environment, passwd its user.
PYTHON_PACKAGES = ("python3", "python3-venv", "ca-certificates", "passwd")
# What the image is made of: a change to any of these builds it again.
SOURCES = ("Dockerfile", "setup.cfg", "pyproject.toml", "README.md", "LICENSE", "lessor", "man")


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def python_base(progress: Progress) -> str:
    """A Debian image with python3, of the Debian release the kind node pins."""
    rootfs = ensure_rootfs("python", KindVersions.pinned().debian, PYTHON_PACKAGES, progress)
    return imported(rootfs, "lessor-python-base", progress)


def source_key(base: str) -> str:
    """A digest of every file the image is built from, and of its base."""
    digest = hashlib.sha256(base.encode())
    for name in SOURCES:
        path = ROOT / name
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in files:
            if "__pycache__" in file.parts:
                continue
            digest.update(str(file.relative_to(ROOT)).encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()[:16]


def wheelhouse(progress: Progress) -> Path:
    """lessor's dependencies as wheels for this machine's Python (the base's is the same
    minor version), made with this machine's pip, which reaches PyPI."""
    directory = kind_cache() / "wheelhouse"
    directory.mkdir(parents=True, exist_ok=True)
    progress("collecting lessor's dependencies as wheels (pip wheel)")
    # The build stage builds lessor's own wheel too: its build backend comes from here as well.
    backend = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(directory),
         f"{ROOT}[server]", *backend],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if result.returncode != 0:
        raise ControlPlaneError(f"pip wheel failed: {result.stderr.strip()[-800:]}")
    return directory


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def served(directory: Path) -> Iterator[str]:
    """`directory` over HTTP on loopback, for the build's pip (it runs on the host network)."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()


def build(progress: Progress = say) -> str:
    """`lessor:dev`, built unless the one there was built from the same sources and base."""
    ensure_docker(progress)
    base = python_base(progress)
    key = source_key(base)
    if image_key(TAG) == key:
        progress(f"{TAG} is up to date")
        return TAG
    wheels = wheelhouse(progress)
    progress(f"building {TAG} on {base} (docker build)")
    with served(wheels) as url:
        docker(
            "build", "--network=host", f"--label={KEY_LABEL}={key}",
            f"--build-arg=BASE={base}", f"--build-arg=PIP_FIND_LINKS={url}",
            "--build-arg=PIP_NO_INDEX=1", "--tag", TAG, str(ROOT),
        )  # fmt: skip
    progress(f"built {TAG}")
    return TAG


def main(argv: list[str]) -> int:
    if argv != ["build"]:
        print("usage: python -m e2e.kind.lessor_image build", file=sys.stderr)
        return 2
    try:
        build()
    except (ControlPlaneError, DockerSetupError, OSError) as error:
        print(f"lessor image: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
