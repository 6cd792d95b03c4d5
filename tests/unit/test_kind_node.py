"""The pure parts of the kind node image recipe (e2e/kind): no docker, no Go, no network."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import time
import tomllib
from pathlib import Path

import pytest

from e2e.kind import oci
from e2e.kind.docker_setup import running_dockerd_pid
from e2e.kind.node_image import cni_config, containerd_config, go_string_constants

WRAPPER = Path(__file__).parents[2] / "e2e" / "kind" / "runc-wrapper"


def test_go_string_constants_joins_raw_strings_and_named_constants() -> None:
    source = (
        'package x\n\nconst image = "example/a:1"\n\n'
        "const manifest = `\nkind: Pod\nimage: ` + image + `\npull: Never\n`\n"
    )

    constants = go_string_constants(source)

    assert constants["image"] == "example/a:1"
    assert constants["manifest"] == "\nkind: Pod\nimage: example/a:1\npull: Never\n"


def test_containerd_config_restricts_oom_uses_the_wrapper_and_the_built_pause(
    tmp_path: Path,
) -> None:
    config = tmp_path / "images/base/files/etc/containerd/config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(
        'sandbox_image = "registry.k8s.io/pause:3.10"\nrestrict_oom_score_adj = false\n'
        "  [runc.options]\n    SystemdCgroup = true\n"
    )

    text = containerd_config(tmp_path, "registry.k8s.io/pause:9.9")

    assert "restrict_oom_score_adj = true" in text
    assert 'sandbox_image = "registry.k8s.io/pause:9.9"' in text
    assert 'BinaryName = "/usr/local/sbin/lessor-runc"' in text
    # Registry hosts from certs.d (e2e/kind/registry.py trusts the session's registry there):
    # without it containerd reads no hosts.toml, and a pull of a private CA's registry fails.
    parsed = tomllib.loads(text)
    registry = parsed["plugins"]["io.containerd.grpc.v1.cri"]["registry"]
    assert registry["config_path"] == "/etc/containerd/certs.d"


def test_containerd_config_says_what_changed_upstream(tmp_path: Path) -> None:
    config = tmp_path / "images/base/files/etc/containerd/config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("version = 3\n")

    with pytest.raises(Exception, match="no longer has"):
        containerd_config(tmp_path, "registry.k8s.io/pause:9.9")


def test_cni_config_chains_ptp_and_portmap() -> None:
    config = json.loads(cni_config())

    assert [plugin["type"] for plugin in config["plugins"]] == ["ptp", "portmap"]


def test_oci_archive_names_the_image_and_lists_its_layers(tmp_path: Path) -> None:
    binary = tmp_path / "tool"
    binary.write_bytes(b"#!/bin/sh\n")
    layer = oci.binary_layer(tmp_path / "layer.tar", {"/usr/local/bin/tool": binary})

    archive = oci.write_archive(
        oci.Image("registry.example/tool:1", (layer,), entrypoint=("/usr/local/bin/tool",)),
        tmp_path / "image.tar",
    )

    with tarfile.open(archive) as opened:
        index = json.load(opened.extractfile("index.json"))  # type: ignore[arg-type]
        descriptor = index["manifests"][0]
        digest = descriptor["digest"].removeprefix("sha256:")
        manifest = json.load(opened.extractfile(f"blobs/sha256/{digest}"))  # type: ignore[arg-type]
        names = opened.getnames()
    assert descriptor["annotations"]["io.containerd.image.name"] == "registry.example/tool:1"
    assert manifest["layers"][0]["digest"] == oci.file_digest(layer)
    assert f"blobs/sha256/{oci.file_digest(layer).removeprefix('sha256:')}" in names
    with tarfile.open(layer) as opened:
        assert opened.getmember("usr/local/bin/tool").mode == 0o755


@pytest.mark.skipif(shutil.which("jq") is None, reason="the runc wrapper needs jq")
def test_runc_wrapper_drops_cap_sys_resource_from_bundle_and_process(tmp_path: Path) -> None:
    caps = {"bounding": ["CAP_SYS_RESOURCE", "CAP_CHOWN"], "effective": ["CAP_SYS_RESOURCE"]}
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(json.dumps({"process": {"capabilities": caps}}))
    process = tmp_path / "process.json"
    process.write_text(json.dumps({"capabilities": caps}))
    fake_runc = tmp_path / "runc"
    fake_runc.write_text('#!/bin/sh\necho "$@"\n')
    fake_runc.chmod(0o755)

    result = subprocess.run(
        [str(WRAPPER), "create", "--bundle", str(bundle), "exec", "-p", str(process), "id"],
        env={"LESSOR_REAL_RUNC": str(fake_runc), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )

    stripped = {"bounding": ["CAP_CHOWN"], "effective": []}
    assert json.loads((bundle / "config.json").read_text())["process"]["capabilities"] == stripped
    assert json.loads(process.read_text())["capabilities"] == stripped
    assert result.stdout.split()[0] == "create"


def test_a_pid_file_counts_only_while_it_names_a_live_dockerd(tmp_path: Path) -> None:
    """A dockerd killed outright leaves its pid file; the pid may be anyone's since."""
    pid_file = tmp_path / "docker.pid"
    dockerd = tmp_path / "dockerd"  # a process whose name is dockerd: sleep under that name
    shutil.copy(shutil.which("sleep") or "/bin/sleep", dockerd)
    named = subprocess.Popen([str(dockerd), "60"])
    try:
        pid_file.write_text(str(named.pid))
        comm = Path(f"/proc/{named.pid}/comm")
        deadline = time.monotonic() + 30  # a ceiling for a hang: the exec is a moment away
        while comm.read_text().strip() != "dockerd" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert running_dockerd_pid(pid_file) == named.pid
    finally:
        named.kill()
        named.wait()
    assert running_dockerd_pid(pid_file) is None  # gone
    pid_file.write_text(str(os.getpid()))  # alive, but not dockerd
    assert running_dockerd_pid(pid_file) is None
    pid_file.write_text("not a pid")
    assert running_dockerd_pid(pid_file) is None
    assert running_dockerd_pid(tmp_path / "absent.pid") is None
