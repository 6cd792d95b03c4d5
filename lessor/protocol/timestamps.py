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
