"""Instants as Kubernetes and lessor's API write them: RFC 3339, in UTC."""

from __future__ import annotations

import datetime


def utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def micro_timestamp(moment: datetime.datetime) -> str:
    """RFC 3339 in UTC with microseconds, as Kubernetes writes metav1.MicroTime."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def timestamp(moment: datetime.datetime) -> str:
    """RFC 3339 in UTC with seconds precision, as Kubernetes writes metav1.Time."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_seconds() -> datetime.datetime:
    """This moment at seconds precision, as Kubernetes writes metav1.Time (and as `timestamp`
    spells it): a status instant compares equal to itself after a round trip through the API
    server."""
    return utcnow().replace(microsecond=0)
