"""`lessor_build_info`: which version of lessor a process runs, for dashboards and alerts.

Prometheus' convention (`<prefix>_build_info`, value 1, the version in labels): a query joins it
to see which pods still run the old release during an upgrade, or which release a latency
change arrived with. Shared by the operator and the API server; in the API server's
multiprocess mode every worker writes the same 1, so the aggregate is their maximum.
"""

from __future__ import annotations

import platform

from prometheus_client import Gauge

from lessor import __version__

BUILD_INFO = Gauge(
    "lessor_build_info",
    "1, labelled with the lessor version and the Python version the process runs.",
    ["version", "python_version"],
    multiprocess_mode="max",
)


def export() -> None:
    """Set the one sample of this process."""
    BUILD_INFO.labels(__version__, platform.python_version()).set(1)
