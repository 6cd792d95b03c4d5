"""The operator's wiring: settings from the command line, and which caches each controller
watches (and so waits for), without a cluster."""

from __future__ import annotations

import dataclasses
import datetime
from pathlib import Path
from typing import Any, cast

from lessor.operator.main import build, parse_args
from lessor.operator.runtime.client import KubeClient
from lessor.operator.wiring.settings import Settings


def test_settings_resolve_the_flags_that_depend_on_others() -> None:
    settings = Settings.from_args(parse_args(["--namespace=team-a", "--lease-retention=0"]))
    assert settings.sandbox_namespace == "team-a", "--sandbox-namespace defaults to --namespace"
    assert settings.lease_retention is None, "0 keeps ended leases forever"
    assert settings.teardown_grace == datetime.timedelta(seconds=120)
    assert settings.local_orphan_grace == datetime.timedelta(seconds=120)
    assert settings.leader_election_id == "lessor-operator"
    assert Settings.from_args(parse_args(["--no-leader-election"])).leader_election_id is None


def test_every_flag_defaults_to_its_settings_default() -> None:
    """A default is declared once, in Settings: a flag with a literal default of its own (or a
    duration's seconds converted wrong) would differ here."""
    settings = Settings.from_args(parse_args([]))
    for setting in dataclasses.fields(Settings):
        if setting.default is not dataclasses.MISSING:
            assert getattr(settings, setting.name) == setting.default, setting.name


KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
"""


def _watched(mode: str, kubeconfig: Path) -> dict[str, list[str]]:
    kubeconfig.write_text(KUBECONFIG)
    args = parse_args(
        ["--no-leader-election", f"--agent-sandbox-mode={mode}", f"--kubeconfig={kubeconfig}"]
    )
    client = cast(KubeClient, cast(Any, object()))
    manager = build(client, Settings.from_args(args), "test")
    return {c.name: [i.resource.plural for i in c.informers] for c in manager.controllers}


def test_each_controller_waits_for_the_caches_it_watches(tmp_path: Path) -> None:
    cluster = {
        "clusterpool": ["clusterpools", "clusterinstances", "clusterleases"],
        "clusterinstance": ["clusterinstances", "clusterleases"],
        "clusterlease": ["clusterleases", "clusterpools", "clusterinstances"],
        "local-orphans": ["clusterinstances"],
        "instance-namespace-orphans": ["clusterinstances"],
        "accesspolicy": ["accesspolicies"],
        "diagnosticsbundle": ["diagnosticsbundles"],
        "lease-retention": ["clusterleases"],
        "reservation": ["configmaps", "clusterleases"],
    }
    assert _watched("disabled", tmp_path / "kubeconfig") == cluster
    assert _watched("external", tmp_path / "kubeconfig") == {
        **cluster,
        "sandboxpool": ["sandboxpools", "sandboxleases"],
        "sandboxlease": ["sandboxleases", "sandboxpools", "pods"],
        "sandboxexecution": ["sandboxexecutions"],
        "reservation": ["configmaps", "clusterleases", "sandboxleases"],
    }


def test_readiness_waits_for_no_kind_an_old_role_or_crd_may_lack(tmp_path: Path) -> None:
    """An upgrade that keeps the previous release's RBAC and CRDs (Helm upgrades no CRD) lacks
    the DiagnosticsBundle kind and the right on ConfigMaps: the operator must become ready
    without those caches (the kind e2e installs 0.1's chart, then upgrades)."""
    (tmp_path / "kubeconfig").write_text(KUBECONFIG)
    args = parse_args(["--no-leader-election", f"--kubeconfig={tmp_path / 'kubeconfig'}"])
    manager = build(cast(KubeClient, cast(Any, object())), Settings.from_args(args), "test")
    optional = {i.resource.plural for i in manager.informers if i.optional}
    assert optional == {"diagnosticsbundles", "configmaps"}
