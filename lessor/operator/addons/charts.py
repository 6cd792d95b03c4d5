"""Helm chart addons, rendered by the `helm` binary (`helm template`) into manifests that are
applied like any other addon's (lessor.operator.addons.preparation).

The decision (docs/operator.md, "Preparation"): the binary, not a release. lessor is Python, so
Helm's Go library is out of reach, and a chart rendered by the Helm that its authors test with is
rendered right; the rendered objects then take the one path every addon takes (server-side
apply, the gates, the start's timeout and backoff), where `helm install` would be a second way
into a cluster with its own waiting and its own state (a release Secret) in a cluster that is
never upgraded, only replaced. Hooks are rendered as plain objects, tests are skipped.

A render is bounded in time and output, runs with a Helm home of its own (no repository,
registry login or cache of the operator's user is read or written), and is kept in memory by
the chart's exact spec: every cluster of a pool gets the same objects, and a pool of twenty
clusters asks its repository once.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
from pathlib import Path

from cachetools import LRUCache

from lessor.controlplane.helm import find_helm
from lessor.operator.addons.manifests import ManifestError
from lessor.resources.addons import Chart

RENDER_TIMEOUT = 120.0
OUTPUT_LIMIT = 16 * 1024 * 1024
ERROR_LIMIT = 2048


def helm_binary(configured: str | None) -> str | None:
    """The helm to render with: the one configured (`--helm`), else `helm` on PATH (the image
    ships one), else the one lessor's development cache built (lessor.controlplane.helm)."""
    if configured:
        return configured
    found = shutil.which("helm") or find_helm()
    return str(found) if found else None


class Charts:
    def __init__(self, helm: str | None) -> None:
        self.helm = helm
        self._rendered: LRUCache[str, str] = LRUCache(maxsize=32)

    async def render(self, release: str, chart: Chart) -> str:
        """The chart's manifests; ManifestError when it cannot be rendered (lasting, but for a
        render that ran out of time)."""
        key = json.dumps([release, chart.model_dump(mode="json")], sort_keys=True)
        if (found := self._rendered.get(key)) is not None:
            return found
        if self.helm is None:
            raise ManifestError(
                "no helm binary to render the chart with (the operator's --helm, or helm on"
                " its PATH)",
                lasting=True,
            )
        with tempfile.TemporaryDirectory(prefix="lessor-helm-") as home:
            text = await self._template(Path(home), release, chart)
        self._rendered[key] = text
        return text

    async def _template(self, home: Path, release: str, chart: Chart) -> str:
        values = home / "values.json"
        values.write_text(json.dumps(chart.values))
        oci = chart.repository.startswith("oci://")
        reference = chart.repository if oci else str(chart.name)
        argv = [
            str(self.helm), "template", release, reference,
            "--version", chart.version, "--namespace", chart.namespace,
            "--values", str(values), "--include-crds", "--skip-tests",
            *([] if oci else ["--repo", chart.repository]),
        ]  # fmt: skip
        environment = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
        }
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=environment,
        )
        assert process.stdout is not None and process.stderr is not None
        try:
            output, errors = await asyncio.wait_for(
                asyncio.gather(
                    _read(process.stdout, OUTPUT_LIMIT),
                    _read(process.stderr, ERROR_LIMIT, cut=True),
                ),
                RENDER_TIMEOUT,
            )
            code = await process.wait()
        except TimeoutError:
            raise ManifestError(
                f"helm template took more than {RENDER_TIMEOUT:.0f}s", lasting=False
            ) from None
        except _TooLargeError:
            raise ManifestError(
                f"the chart renders to more than {OUTPUT_LIMIT} bytes", lasting=True
            ) from None
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
        if code != 0:
            said = errors.decode(errors="replace").strip()
            raise ManifestError(f"helm template failed: {said}", lasting=True)
        return output.decode(errors="replace")


class _TooLargeError(Exception):
    pass


async def _read(stream: asyncio.StreamReader, limit: int, *, cut: bool = False) -> bytes:
    """The stream's bytes up to `limit`; past it, _TooLargeError, or with `cut` the first `limit`
    bytes (the rest is read and dropped, so the process is never blocked on a full pipe)."""
    kept = bytearray()
    while chunk := await stream.read(65536):
        if len(kept) + len(chunk) > limit and not cut:
            raise _TooLargeError
        kept += chunk[: max(0, limit - len(kept))]
    return bytes(kept)
