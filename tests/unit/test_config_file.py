"""The servers' configuration file: values become defaults, flags win, mistakes name the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from lessor.apiserver.server import _hide_pool_status, _metrics_port
from lessor.apiserver.server import parse_args as apiserver_args
from lessor.operator.main import parse_args as operator_args

ROOT = Path(__file__).resolve().parents[2]


def test_the_shipped_configmap_is_a_valid_config(tmp_path: Path) -> None:
    configmap = yaml.safe_load((ROOT / "manifests" / "base" / "config.yaml").read_text())
    path = tmp_path / "config.yaml"
    path.write_text(configmap["data"]["config.yaml"])
    args = operator_args([f"--config={path}"])
    assert (args.namespace, args.workers, args.teardown_grace) == ("lessor-system", 4, 120)
    assert apiserver_args([f"--config={path}"]).bind == "0.0.0.0:8000"


def test_file_values_are_defaults_and_flags_win(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("namespace: team-a\napiserver: {workers: 5, gracefulTimeout: 3}\n")
    args = apiserver_args([f"--config={path}"])
    assert (args.namespace, args.workers, args.graceful_timeout) == ("team-a", 5, 3)
    assert args.worker_connections == 1000, "keys the file leaves out keep the flag default"
    assert apiserver_args([f"--config={path}", "--workers=1"]).workers == 1
    assert operator_args([f"--config={path}"]).workers == 4, "another component's section"
    path.write_text("agentSandbox: {mode: external}\n")
    assert apiserver_args([f"--config={path}"]).agent_sandbox_mode == "external"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("apiserver: {wokers: 3}\n", "apiserver.wokers: Extra inputs are not permitted"),
        ("operator: {workers: 0}\n", "operator.workers: Input should be greater than or equal"),
        ("agentSandbox: {mode: on}\n", "agentSandbox.mode: Input should be 'disabled' or"),
        ("namespace: [\n", "not YAML"),
    ],
)
def test_a_bad_file_stops_with_the_key_at_fault(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(SystemExit) as stopped:
        operator_args([f"--config={path}"])
    assert message in str(stopped.value)
    assert str(path) in str(stopped.value)


def test_every_operator_key_of_the_file_reaches_its_flag(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("operator: {localOrphanGrace: 7, localBackendDir: /srv/local}\n")
    args = operator_args([f"--config={path}"])
    assert (args.local_orphan_grace, str(args.local_backend_dir)) == (7, "/srv/local")


def test_the_pool_rows_are_public_unless_hidden_and_the_old_key_never_unhides(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Anonymous GET /v1/status lists the pools by default (spec 4.6); `hidePoolStatus` hides
    them. The deprecated `publicPoolStatus`: true asks for the default (nothing to do), false
    for what used to be the default, so it hides them rather than start telling strangers."""
    path = tmp_path / "config.yaml"

    def hidden(text: str, *flags: str) -> bool:
        path.write_text(text)
        return _hide_pool_status(apiserver_args([f"--config={path}", *flags]))

    assert hidden("{}\n") is False
    assert hidden("apiserver: {hidePoolStatus: true}\n") is True
    assert hidden("apiserver: {hidePoolStatus: true}\n", "--no-hide-pool-status") is False
    assert not caplog.records
    assert hidden("apiserver: {publicPoolStatus: true}\n") is False
    assert hidden("apiserver: {publicPoolStatus: false}\n") is True
    assert hidden("{}\n", "--no-public-pool-status") is True
    assert hidden("apiserver: {publicPoolStatus: false, hidePoolStatus: false}\n") is True
    assert len(caplog.records) == 4
    assert all("deprecated" in record.getMessage() for record in caplog.records)
    with pytest.raises(SystemExit, match="contradict"):
        hidden("apiserver: {publicPoolStatus: true, hidePoolStatus: true}\n")


def test_metrics_bind_is_optional_and_off_the_apis_port(tmp_path: Path) -> None:
    """No metrics listener by default (/metrics at the API's address); the shipped ConfigMap
    gives it one; its port must differ from the API's."""
    assert _metrics_port("0.0.0.0:8000", apiserver_args([]).metrics_bind) is None
    configmap = yaml.safe_load((ROOT / "manifests" / "base" / "config.yaml").read_text())
    path = tmp_path / "config.yaml"
    path.write_text(configmap["data"]["config.yaml"])
    args = apiserver_args([f"--config={path}"])
    assert _metrics_port(args.bind, args.metrics_bind) == 9090
    with pytest.raises(SystemExit, match="other than"):
        _metrics_port("0.0.0.0:9090", "127.0.0.1:9090")
