"""The type of a decoded JSON object (a Kubernetes object, a request or response body), named
once for every component."""

from __future__ import annotations

from typing import Any

Json = dict[str, Any]
