"""The kubeconfigs this CLI wrote for leases, and their removal when the lease is released.

`lessor lease` and `lessor kubeconfig` write a lease's kubeconfig to a file of its own
(`~/.kube/lessor-<id>`, or `--kubeconfig PATH`), or merge it into a kubeconfig (`--merge`: the
first file of $KUBECONFIG, else ~/.kube/config) as the context, cluster and user
`lessor-<id>`. Each is recorded in `$XDG_CONFIG_HOME/lessor/kubeconfigs.json` with the digest of
what was written, so that `lessor release` removes exactly what it wrote: a file the user has
since replaced (its digest differs) is left alone, and a merged kubeconfig loses only the
lease's three entries. A released cluster's credentials are worthless, and a stale context is
the kind of thing that sends `kubectl delete` to the wrong place.

What the server hands out is checked before anything is written (review N11): a kubeconfig
whose users run a program (`exec`, `auth-provider`), read a local file and send it
(`tokenFile`), or whose clusters go through another host (`proxy-url`) or are not verified
(`insecure-skip-tls-verify: true`) is refused, unless the user passes
--allow-unsafe-kubeconfig. lessor's own backends never publish any of them; a server (or a
tenant of a warm cluster) that does would run code, or read files, on the user's machine.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import yaml

from lessor.cli.config import config_dir
from lessor.cli.errors import SERVER, USAGE, CliError
from lessor.cli.files import write_private


def _records_path() -> Path:
    return config_dir() / "kubeconfigs.json"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _load() -> dict[str, Any]:
    try:
        loaded = json.loads(_records_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _record(lease_id: str, entry: dict[str, str]) -> None:
    records = _load()
    entries = [e for e in records.get(lease_id, []) if e.get("path") != entry["path"]]
    records[lease_id] = [*entries, entry]
    write_private(_records_path(), json.dumps(records, indent=1) + "\n")


def default_path(lease_id: str) -> Path:
    return Path.home() / ".kube" / f"lessor-{lease_id}"


def context_name(lease_id: str) -> str:
    return f"lessor-{lease_id}"


ALLOW_FLAG = "--allow-unsafe-kubeconfig"
UNSAFE = (
    ("users", "user", ("exec", "auth-provider", "tokenFile")),
    ("clusters", "cluster", ("proxy-url", "insecure-skip-tls-verify")),
)


def _unsafe(document: dict[str, Any]) -> list[str]:
    """Where `document` has what kubectl would run, read, route through or not verify."""
    found: list[str] = []
    for kind, key, names in UNSAFE:
        for index, entry in enumerate(document.get(kind) or []):
            fields = entry.get(key) if isinstance(entry, dict) else None
            if not isinstance(fields, dict):
                continue
            for name in names:
                value = fields.get(name)
                skips = name == "insecure-skip-tls-verify"  # false is what a kubeconfig means
                if (value is True) if skips else (value is not None):
                    found.append(f"{kind}[{index}].{key}.{name}")
    return found


def checked(lease_id: str, kubeconfig: str, *, allow_unsafe: bool = False) -> dict[str, Any]:
    """The server's kubeconfig for the lease, parsed; refused (one line, SERVER) when it is no
    kubeconfig, or has an unsafe entry and `allow_unsafe` is not given."""
    try:
        document = yaml.safe_load(kubeconfig)
    except yaml.YAMLError:
        document = None
    lists = ("clusters", "users", "contexts")
    if not isinstance(document, dict) or not all(
        isinstance(document.get(kind) or [], list)
        and all(isinstance(e, dict) for e in document.get(kind) or [])
        for kind in lists
    ):
        raise CliError(f"the server's kubeconfig for lease {lease_id} is not a kubeconfig", SERVER)
    found = [] if allow_unsafe else _unsafe(document)
    if found:
        raise CliError(
            f"refused the server's kubeconfig for lease {lease_id}: it has {', '.join(found)}, "
            f"which kubectl would run, read, route through or not verify ({ALLOW_FLAG} takes it "
            "as it is)",
            SERVER,
        )
    return document


def write(
    lease_id: str, kubeconfig: str, path: str | None = None, *, allow_unsafe: bool = False
) -> Path:
    """Write the lease's kubeconfig to a file of its own (mode 0600; `path`, else
    ~/.kube/lessor-<id>) and record it; an unsafe one only with `allow_unsafe`."""
    checked(lease_id, kubeconfig, allow_unsafe=allow_unsafe)
    target = Path(path).expanduser() if path else default_path(lease_id)
    write_private(target, kubeconfig)
    _record(lease_id, {"path": str(target), "sha256": _digest(kubeconfig)})
    return target


def merged_path() -> Path:
    """Where kubectl writes: the first file of $KUBECONFIG, else ~/.kube/config."""
    listed = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    return Path(listed[0]).expanduser() if listed else Path.home() / ".kube" / "config"


def _read_config(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {"apiVersion": "v1", "kind": "Config"}
    except OSError as error:
        raise CliError(f"cannot read {path}: {error.strerror}", USAGE) from None
    try:
        loaded = yaml.safe_load(text) or {}
    except yaml.YAMLError:
        raise CliError(f"{path} is not YAML; left unchanged", USAGE) from None
    if not isinstance(loaded, dict):
        raise CliError(f"{path} is not a kubeconfig; left unchanged", USAGE)
    return loaded


def _without(entries: Any, name: str) -> list[Any]:
    """`entries` (a kubeconfig's list of clusters, users or contexts) without `name`."""
    return [e for e in entries or [] if not (isinstance(e, dict) and e.get("name") == name)]


def merge(lease_id: str, kubeconfig: str, *, allow_unsafe: bool = False) -> tuple[Path, str]:
    """Merge the lease's cluster, user and context into the user's kubeconfig under one unique
    name, leaving everything else in it (current-context included) as it was; an unsafe
    kubeconfig only with `allow_unsafe`."""
    source = checked(lease_id, kubeconfig, allow_unsafe=allow_unsafe)
    name = context_name(lease_id)
    path = merged_path()
    config = _read_config(path)
    context = {**source["contexts"][0]["context"], "cluster": name, "user": name}
    for kind, key, value in (
        ("clusters", "cluster", source["clusters"][0]["cluster"]),
        ("users", "user", source["users"][0]["user"]),
        ("contexts", "context", context),
    ):
        config[kind] = [*_without(config.get(kind), name), {"name": name, key: value}]
    write_private(path, yaml.safe_dump(config, sort_keys=False))
    _record(lease_id, {"path": str(path), "context": name})
    return path, name


def written() -> dict[str, list[str]]:
    """Per lease, what was written for it: a file, or a context in a file."""
    return {
        lease_id: [
            f"context {e['context']} in {e['path']}" if "context" in e else e["path"]
            for e in entries
        ]
        for lease_id, entries in _load().items()
    }


def remove(lease_id: str) -> list[str]:
    """Remove what was written for the lease; what was removed, for the user to read."""
    records = _load()
    removed: list[str] = []
    for entry in records.pop(lease_id, []):
        path = Path(entry["path"])
        if "context" in entry:
            with contextlib.suppress(CliError):
                if _unmerge(path, entry["context"]):
                    removed.append(f"context {entry['context']} of {path}")
            continue
        with contextlib.suppress(OSError):
            if _digest(path.read_text(encoding="utf-8")) == entry.get("sha256"):
                path.unlink()
                removed.append(str(path))
    write_private(_records_path(), json.dumps(records, indent=1) + "\n")
    return removed


def _unmerge(path: Path, name: str) -> bool:
    if not path.exists():
        return False
    config = _read_config(path)
    before = json.dumps(config, sort_keys=True, default=str)
    for kind in ("clusters", "users", "contexts"):
        config[kind] = _without(config.get(kind), name)
    if config.get("current-context") == name:
        config["current-context"] = ""
    if json.dumps(config, sort_keys=True, default=str) == before:
        return False
    write_private(path, yaml.safe_dump(config, sort_keys=False))
    return True
