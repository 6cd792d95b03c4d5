"""Everything the kind scenarios build, built before they start: `python -m e2e.kind.prepare`.

On a fresh machine these builds (the node image and kind, kube-router, lessor's Python base
and image, agent-sandbox's controller and the sandbox image, vcluster, Traefik, Helm) take most
of an hour of Go and docker work. Run inside the first scenario's fixture, they ran under
pytest-timeout's 15-minute hang guard for one test and failed it there (the first `make test`
on a fresh machine at 68fd1f0: every kind scenario errored in set-up while Traefik was still
compiling). tox runs this step first, as it runs `python -m lessor.controlplane build` before
the integration tests; each build is cached and keyed by what it is made of, so on a warm
machine this takes seconds, and the fixture then finds every image ready.
"""

from __future__ import annotations

import sys
import time

from e2e.kind import gateway, lessor_image, network_policies, node_image, sandboxes, vcluster
from e2e.kind.docker_setup import exit_code
from e2e.kind.lessor_image import say
from e2e.kind.platform_install import release_dist
from e2e.kind.registry import ensure_registry
from lessor.controlplane.helm import ensure_helm
from release import build as release_build


def prepare() -> None:
    started = time.monotonic()
    node_image.build(say)
    network_policies.build(say)
    # lessor as a platform team gets it: the release's artifacts, the image among them
    # (e2e/kind/platform_install.py installs from these).
    release_build.build(release_dist(), say)
    base = lessor_image.python_base(say)
    sandboxes.build(base, say)
    vcluster.build(base, say)
    gateway.build(base, say)
    ensure_helm(say)  # lessor is installed with its chart (e2e/kind/chart.py)
    ensure_registry(say)  # the session's OCI registry (e2e/kind/registry.py)
    say(f"kind scenarios' images ready in {time.monotonic() - started:.0f}s")


def main(argv: list[str]) -> int:
    if argv:
        print("usage: python -m e2e.kind.prepare", file=sys.stderr)
        return 2
    return exit_code("kind images", prepare)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
