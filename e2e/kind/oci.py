"""Container images written directly as OCI archives, for `ctr images import` in the kind node.

Every image the node runs is one or two layers: a binary (FROM scratch), or a Debian root
filesystem plus a binary. Writing the OCI layout ourselves needs neither a registry nor a docker
build, and gives a file that containerd imports as is.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

LAYER = "application/vnd.oci.image.layer.v1.tar"
CONFIG = "application/vnd.oci.image.config.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"
DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class Image:
    """What goes in one image: layers (tarballs) and the runtime config of its process."""

    name: str
    layers: tuple[Path, ...]
    entrypoint: tuple[str, ...] = ()
    user: str = ""
    env: tuple[str, ...] = (DEFAULT_PATH,)
    labels: dict[str, str] = field(default_factory=dict)


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return f"sha256:{digest.hexdigest()}"


def binary_layer(path: Path, files: dict[str, Path]) -> Path:
    """A layer tarball placing each source file at its path in the image (mode 0755)."""
    with tarfile.open(path, "w") as archive:
        made: set[str] = set()
        for target in sorted(files):
            parts = target.strip("/").split("/")
            for depth in range(1, len(parts)):
                directory = "/".join(parts[:depth])
                if directory not in made:
                    info = tarfile.TarInfo(directory)
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    archive.addfile(info)
                    made.add(directory)
            info = archive.gettarinfo(str(files[target]), arcname="/".join(parts))
            info.mode, info.uid, info.gid, info.uname, info.gname = 0o755, 0, 0, "", ""
            with files[target].open("rb") as handle:
                archive.addfile(info, handle)
    return path


def _add_bytes(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), 0o644
    archive.addfile(info, io.BytesIO(data))


def _blob(archive: tarfile.TarFile, data: bytes, media_type: str) -> dict[str, object]:
    digest = f"sha256:{hashlib.sha256(data).hexdigest()}"
    _add_bytes(archive, f"blobs/sha256/{digest.removeprefix('sha256:')}", data)
    return {"mediaType": media_type, "digest": digest, "size": len(data)}


def write_archive(image: Image, path: Path) -> Path:
    """Write `image` as an OCI image layout tarball named by `image.name`."""
    layer_digests = [file_digest(layer) for layer in image.layers]
    runtime: dict[str, object] = {"Env": list(image.env), "Labels": image.labels}
    if image.entrypoint:
        runtime["Entrypoint"] = list(image.entrypoint)
    if image.user:
        runtime["User"] = image.user
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": runtime,
        "rootfs": {"type": "layers", "diff_ids": layer_digests},
    }
    with tarfile.open(path, "w") as archive:
        _add_bytes(archive, "oci-layout", b'{"imageLayoutVersion": "1.0.0"}')
        layers = []
        for layer, digest in zip(image.layers, layer_digests, strict=True):
            archive.add(str(layer), arcname=f"blobs/sha256/{digest.removeprefix('sha256:')}")
            layers.append({"mediaType": LAYER, "digest": digest, "size": layer.stat().st_size})
        config_descriptor = _blob(archive, json.dumps(config).encode(), CONFIG)
        manifest = {
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "config": config_descriptor,
            "layers": layers,
        }
        manifest_descriptor = _blob(archive, json.dumps(manifest).encode(), MANIFEST)
        manifest_descriptor["annotations"] = {
            "io.containerd.image.name": image.name,
            "org.opencontainers.image.ref.name": image.name,
        }
        index = {"schemaVersion": 2, "mediaType": INDEX, "manifests": [manifest_descriptor]}
        _add_bytes(archive, "index.json", json.dumps(index).encode())
    return path
