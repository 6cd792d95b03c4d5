"""A docker engine that runs privileged containers here: `python -m e2e.kind.docker_setup`.

kind's node is a privileged container, and on these machines `docker run --privileged` fails
because CAP_SYS_RESOURCE is not in the bounding set. This installs Debian's docker.io when dockerd
is missing, registers a runc wrapper that drops that capability as dockerd's default runtime,
starts dockerd when it does not answer, and proves a privileged container runs. Every step is
idempotent, so it is safe to run before every kind session.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

from lessor.controlplane.binaries import cache_root
from lessor.controlplane.errors import ControlPlaneError

Progress = Callable[[str], None]

WRAPPER_SOURCE = Path(__file__).with_name("runc-wrapper")
WRAPPER_PATH = Path("/usr/local/lib/lessor/runc-wrapper")
DAEMON_JSON = Path("/etc/docker/daemon.json")
DOCKER_PID = Path("/var/run/docker.pid")
RUNTIME_NAME = "lessor-runc"
PROBE_IMAGE = "lessor-docker-probe:tini"
TINI_STATIC = Path("/usr/bin/tini-static")
APT_PACKAGES = ("docker.io", "jq", "tini")
START_TIMEOUT = 60.0


class DockerSetupError(Exception):
    """A step of the docker setup failed; the message says which and what to look at."""


def docker_dir() -> Path:
    """Where dockerd's log lives: the project's cache, so it survives between runs."""
    return cache_root() / "docker"


def ensure_packages(progress: Progress) -> None:
    """Install Debian's docker.io (and jq, which the wrapper uses) when either is missing."""
    if shutil.which("dockerd") and shutil.which("jq") and TINI_STATIC.is_file():
        return
    if shutil.which("apt-get") is None:
        raise DockerSetupError("dockerd is not installed and apt-get is missing to install it")
    progress(f"installing {' '.join(APT_PACKAGES)} with apt-get")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update"], ["apt-get", "install", "-y", *APT_PACKAGES]):
        result = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            last = (result.stderr.strip().splitlines() or ["no output"])[-1]
            raise DockerSetupError(f"`{' '.join(command)}` failed: {last}")


def install_wrapper() -> bool:
    """Copy the runc wrapper to a fixed path outside the repository; True when it changed."""
    content = WRAPPER_SOURCE.read_bytes()
    if WRAPPER_PATH.is_file() and WRAPPER_PATH.read_bytes() == content:
        return False
    WRAPPER_PATH.parent.mkdir(parents=True, exist_ok=True)
    WRAPPER_PATH.write_bytes(content)
    WRAPPER_PATH.chmod(0o755)
    return True


def write_daemon_json() -> bool:
    """Make the wrapper dockerd's default runtime, keeping other settings; True when it changed."""
    current: dict[str, object] = {}
    if DAEMON_JSON.is_file():
        try:
            current = json.loads(DAEMON_JSON.read_text() or "{}")
        except json.JSONDecodeError as error:
            raise DockerSetupError(f"{DAEMON_JSON} is not valid JSON: {error}") from None
    runtimes = dict(current.get("runtimes") or {})  # type: ignore[call-overload]
    runtimes[RUNTIME_NAME] = {"path": str(WRAPPER_PATH)}
    wanted = {**current, "runtimes": runtimes, "default-runtime": RUNTIME_NAME}
    if wanted == current:
        return False
    DAEMON_JSON.parent.mkdir(parents=True, exist_ok=True)
    DAEMON_JSON.write_text(json.dumps(wanted, indent=2) + "\n")
    return True


def docker_answers() -> bool:
    result = subprocess.run(["docker", "info"], capture_output=True, check=False)
    return result.returncode == 0


def running_dockerd_pid(pid_file: Path = DOCKER_PID) -> int | None:
    """The pid of a dockerd that is alive, from its pid file: the pid of a dockerd that was
    killed may name another process since."""
    try:
        pid = int(pid_file.read_text().strip())
        command = Path(f"/proc/{pid}/comm").read_text().strip()
    except (OSError, ValueError):
        return None
    return pid if command == "dockerd" else None


def start_dockerd(progress: Progress) -> None:
    """Start dockerd detached from this process, its output in the cache, and wait for it."""
    log_path = docker_dir() / "dockerd.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    if DOCKER_PID.exists() and running_dockerd_pid() is None:
        # A dockerd killed outright (a session ended under it) leaves its pid file, and dockerd
        # refuses to start while the pid there is alive, whatever process it now is.
        progress(f"removing {DOCKER_PID}, left by a dockerd that is gone")
        DOCKER_PID.unlink()
    progress(f"starting dockerd (log: {log_path})")
    with log_path.open("ab") as log:
        subprocess.Popen(["dockerd"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if docker_answers():
            return
        time.sleep(1)
    tail = log_path.read_text(errors="replace").strip().splitlines()[-1:] or ["(empty log)"]
    raise DockerSetupError(
        f"dockerd did not answer within {START_TIMEOUT:.0f}s; last log line: {tail[0]}"
    )


def reload_dockerd(progress: Progress) -> None:
    """Make a running dockerd read daemon.json again (runtimes are reloadable on SIGHUP)."""
    pid = running_dockerd_pid()
    if pid is None:
        return
    progress(f"reloading dockerd (pid {pid}) for the new runtime configuration")
    os.kill(pid, signal.SIGHUP)
    time.sleep(1)


def probe_image_tar() -> bytes:
    """An image holding only tini-static: runs with no registry and no base image."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        archive.add(TINI_STATIC, arcname="tini")
    return buffer.getvalue()


def prove_privileged() -> None:
    """Run a privileged container, which is exactly what fails without the wrapper."""
    listed = subprocess.run(
        ["docker", "image", "inspect", PROBE_IMAGE], capture_output=True, check=False
    )
    if listed.returncode != 0:
        subprocess.run(
            ["docker", "import", "-", PROBE_IMAGE],
            input=probe_image_tar(),
            capture_output=True,
            check=True,
        )
    result = subprocess.run(
        ["docker", "run", "--rm", "--privileged", PROBE_IMAGE, "/tini", "--version"],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise DockerSetupError(f"`docker run --privileged` failed: {last}")


def ensure_docker(progress: Progress = print) -> None:
    """Bring docker to the state kind needs here, doing only the steps that are missing."""
    ensure_packages(progress)
    changed = install_wrapper()
    changed = write_daemon_json() or changed
    if docker_answers():
        if changed:
            reload_dockerd(progress)
    else:
        start_dockerd(progress)
    prove_privileged()
    progress("docker is ready: privileged containers run")


def exit_code(what: str, step: Callable[[], object]) -> int:
    """Run one build or set-up step of a `python -m e2e.kind.*` command: 0 when it worked, 1
    with one line saying why when it failed as such a step can (a build, a tool, a command)."""
    try:
        step()
    except (ControlPlaneError, DockerSetupError, OSError) as error:
        print(f"{what}: {error}", file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as error:
        print(f"{what}: `{' '.join(map(str, error.cmd))}` exited {error.returncode}",
              file=sys.stderr)  # fmt: skip
        return 1
    return 0


def main() -> int:
    try:
        ensure_docker()
    except DockerSetupError as error:
        print(f"docker setup failed: {error}", file=sys.stderr)
        return 1
    except OSError as error:  # not root, or a tool missing: say which file or program
        print(f"docker setup failed: {error}", file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as error:
        print(
            f"docker setup failed: `{' '.join(map(str, error.cmd))}` exited {error.returncode}",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
