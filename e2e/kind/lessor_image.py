"""The lessor image, built here: `python -m e2e.kind.lessor_image build`.

The project's Dockerfile builds on `python:3.12-slim` for users; no registry is reachable from
these machines, so its base (a build argument) is made from Debian packages (bookworm's python3
and its venv module, by mmdebstrap, imported into docker), and its Python dependencies, which
its build stage would fetch from PyPI, come from a wheel directory made with this machine's pip
and served to the build over loopback. The image is tagged `lessor:dev`, what
manifests/overlays/dev runs, and is rebuilt only when the package's sources or the base change.

`make release` (release/build.py) builds the same image as `lessor:<version>`, labelled with the
commit and the repository it comes from, and writes it as an OCI archive with `save_archive`.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import io
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from e2e.kind import oci
from e2e.kind.components import KindVersions, kind_cache
from e2e.kind.docker_setup import DockerSetupError, docker_answers, ensure_docker
from e2e.kind.node_image import KEY_LABEL, docker, image_id, image_key, imported
from e2e.kind.rootfs import ensure_rootfs
from lessor import __version__
from lessor.controlplane.binaries import Progress
from lessor.controlplane.errors import ControlPlaneError
from lessor.controlplane.helm import ensure_helm, helm_version

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


def helm_builder(base: str, progress: Progress) -> str:
    """An image holding the helm built here at /go/bin/helm, for the Dockerfile's HELM_BUILDER:
    golang cannot be pulled here, and the pinned helm is already built (lessor.controlplane.helm).
    Made once per base and helm version."""
    tag = f"lessor-helm-builder:{helm_version()}-{base.rsplit(':', 1)[-1]}"
    if image_id(tag) is None:
        progress(f"making {tag} (the helm built here, on {base})")
        with tempfile.TemporaryDirectory(prefix="lessor-helm-builder-") as context:
            shutil.copy2(ensure_helm(progress), Path(context) / "helm")
            (Path(context) / "Dockerfile").write_text(f"FROM {base}\nCOPY helm /go/bin/helm\n")
            docker("build", "--tag", tag, context)
    return tag


@dataclass(frozen=True)
class Labels:
    """The Dockerfile's label arguments. The version is the package's, always passed (the
    Dockerfile's default serves a plain `docker build`); the commit and the repository are set
    for a release only, so that lessor:dev is not rebuilt for every commit."""

    revision: str = ""
    source: str = ""

    def build_args(self) -> list[str]:
        given = {"VERSION": __version__, "REVISION": self.revision, "SOURCE": self.source}
        return [f"--build-arg={name}={value}" for name, value in given.items() if value]

    def key_parts(self) -> tuple[str, ...]:
        """What the sources do not already say (the version is in lessor/__init__.py)."""
        given = {"REVISION": self.revision, "SOURCE": self.source}
        return tuple(f"{name}={value}" for name, value in given.items() if value)


def source_key(base: str, *extra: str) -> str:
    """A digest of every file the image is built from, of its base, and of `extra` (build
    arguments the files do not hold; none for lessor:dev, whose key is unchanged by them)."""
    digest = hashlib.sha256(base.encode())
    for part in extra:
        digest.update(b"\0" + part.encode())
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
    # What the wheels are for: the packaging metadata and this Python. pip's resolver takes half
    # a minute of CPU to find them all present, so a wheelhouse filled for the same is used as is.
    metadata = b"".join((ROOT / name).read_bytes() for name in ("setup.cfg", "pyproject.toml"))
    key = hashlib.sha256(metadata + sys.version.encode()).hexdigest()[:16]
    stamp = directory / ".filled-for"
    if stamp.exists() and stamp.read_text() == key:
        return directory
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
    stamp.write_text(key)
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


def build(
    progress: Progress = say,
    *,
    tag: str = TAG,
    labels: Labels | None = None,
    base: str | None = None,
) -> str:
    """`tag` (lessor:dev unless told), built unless the one there was built from the same
    sources, base and labels.

    Without `base`, the Debian base made here and the wheels served from this machine: no
    registry is needed, and docker is set up as the kind e2e needs it. With `base` (an image
    docker can pull, e.g. python:3.12-slim where Docker Hub and PyPI answer: the release
    workflow), the build's pip reaches PyPI itself, and docker must already be running.
    """
    labels = labels or Labels()
    if base is None:
        ensure_docker(progress)
        base = python_base(progress)
        offline = True
    elif docker_answers():
        offline = False
    else:
        raise ControlPlaneError(f"docker does not answer, and {tag} is to be built on {base}")
    helm = [f"--build-arg=HELM_BUILDER={helm_builder(base, progress)}"] if offline else []
    key = source_key(base, *labels.key_parts(), *helm)
    if image_key(tag) == key:
        progress(f"{tag} is up to date")
        return tag
    progress(f"building {tag} on {base} (docker build)")
    arguments = [
        "build", f"--label={KEY_LABEL}={key}", f"--build-arg=BASE={base}", *helm,
        *labels.build_args(), "--tag", tag,
    ]  # fmt: skip
    if not offline:
        docker(*arguments, str(ROOT))
    else:
        wheels = wheelhouse(progress)
        with served(wheels) as url:
            docker(
                *arguments, "--network=host", f"--build-arg=PIP_FIND_LINKS={url}",
                "--build-arg=PIP_NO_INDEX=1", str(ROOT),
            )  # fmt: skip
    progress(f"built {tag}")
    return tag


def _archive_config_digest(path: Path) -> str | None:
    """The config digest of the image in an OCI archive written by `save_archive`, which puts
    its index and manifest first, so that this reads a few kilobytes of a large file."""
    try:
        with tarfile.open(path, "r|") as archive:
            blobs: dict[str, bytes] = {}
            index: dict[str, Any] | None = None
            for member in archive:
                if not member.isfile() or member.size > 1 << 20:
                    break
                data = _read(archive.extractfile(member))
                if member.name == "index.json":
                    index = json.loads(data)
                elif member.name.startswith("blobs/sha256/"):
                    blobs[member.name.removeprefix("blobs/sha256/")] = data
            if index is None:
                return None
            manifest = json.loads(blobs[index["manifests"][0]["digest"].removeprefix("sha256:")])
            return str(manifest["config"]["digest"])
    except (OSError, tarfile.TarError, KeyError, IndexError, ValueError):
        return None


def _read(handle: IO[bytes] | None) -> bytes:
    if handle is None:
        raise ValueError("a tar member without content")
    return handle.read()


def _add(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)  # mtime 0, root, 0644: the same image makes the same file
    info.size, info.mode = len(data), 0o644
    archive.addfile(info, io.BytesIO(data))


def _layer(source: tarfile.TarFile, name: str, diff_id: str) -> dict[str, Any]:
    """The descriptor of one saved layer: uncompressed from docker's classic store (its digest
    is its diff ID), gzip from a containerd-backed one."""
    digest = hashlib.sha256()
    handle = _open(source, name)
    head = handle.read(2)
    digest.update(head)
    for chunk in iter(lambda: handle.read(1 << 20), b""):
        digest.update(chunk)
    found = f"sha256:{digest.hexdigest()}"
    if found != diff_id and head != b"\x1f\x8b":
        raise ControlPlaneError(f"layer {name} is neither its diff ID {diff_id} nor gzip")
    media_type = oci.LAYER if found == diff_id else f"{oci.LAYER}+gzip"
    return {"mediaType": media_type, "digest": found, "size": source.getmember(name).size}


def _open(archive: tarfile.TarFile, name: str) -> IO[bytes]:
    handle = archive.extractfile(name)
    if handle is None:
        raise ControlPlaneError(f"docker save wrote no file {name}")
    return handle


def _blob(digest: str) -> str:
    return f"blobs/sha256/{digest.removeprefix('sha256:')}"


def save_archive(tag: str, path: Path, progress: Progress = say) -> Path:
    """`tag` as one tarball that is both an OCI image layout (oci-layout, index.json, blobs:
    what skopeo, crane, oras and containerd read) and a `docker save` archive (manifest.json,
    which `docker load` reads), as docker 25 saves them. The docker here (20.10) saves only the
    second form, so its layers and config are written again as the first. The config is
    docker's own, so the archive's config digest is the image ID, and an archive of the same
    image is not written again; every entry has the same owner, mode and time, so the same
    image makes the same file."""
    image = image_id(tag)
    if image is None:
        raise ControlPlaneError(f"no image {tag} to save")
    if path.is_file() and _archive_config_digest(path) == image:
        progress(f"{path.name} holds {tag} already")
        return path
    progress(f"saving {tag} as {path.name} (docker save, then an OCI layout)")
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".lessor-image-", dir=path.parent) as scratch:
        saved = Path(scratch) / "docker-save.tar"
        docker("save", "--output", str(saved), tag)
        partial = Path(scratch) / path.name
        with tarfile.open(saved) as source, tarfile.open(partial, "w") as target:
            (entry,) = json.loads(_open(source, "manifest.json").read())
            config = _open(source, entry["Config"]).read()
            diff_ids = json.loads(config)["rootfs"]["diff_ids"]
            layers = [
                _layer(source, name, diff_id)
                for name, diff_id in zip(entry["Layers"], diff_ids, strict=True)
            ]
            config_digest = f"sha256:{hashlib.sha256(config).hexdigest()}"
            manifest = json.dumps(
                {
                    "schemaVersion": 2,
                    "mediaType": oci.MANIFEST,
                    "config": {
                        "mediaType": oci.CONFIG,
                        "digest": config_digest,
                        "size": len(config),
                    },
                    "layers": layers,
                }
            ).encode()
            manifest_digest = f"sha256:{hashlib.sha256(manifest).hexdigest()}"
            reference = {
                "io.containerd.image.name": f"docker.io/library/{tag}",
                "org.opencontainers.image.ref.name": tag.rpartition(":")[2],
            }
            index = {
                "schemaVersion": 2,
                "mediaType": oci.INDEX,
                "manifests": [
                    {
                        "mediaType": oci.MANIFEST,
                        "digest": manifest_digest,
                        "size": len(manifest),
                        "annotations": reference,
                    }
                ],
            }
            loadable = [
                {
                    "Config": _blob(config_digest),
                    "RepoTags": [tag],
                    "Layers": [_blob(layer["digest"]) for layer in layers],
                }
            ]
            # The small entries first: _archive_config_digest reads no further than them.
            _add(target, "oci-layout", b'{"imageLayoutVersion": "1.0.0"}')
            _add(target, "index.json", json.dumps(index).encode())
            _add(target, _blob(manifest_digest), manifest)
            _add(target, _blob(config_digest), config)
            _add(target, "manifest.json", json.dumps(loadable).encode())
            written: set[str] = set()
            for name, layer in zip(entry["Layers"], layers, strict=True):
                if layer["digest"] in written:  # the same layer twice (an empty one): one blob
                    continue
                written.add(layer["digest"])
                info = tarfile.TarInfo(_blob(layer["digest"]))
                info.size, info.mode = layer["size"], 0o644
                target.addfile(info, _open(source, name))
        partial.rename(path)
    return path


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
