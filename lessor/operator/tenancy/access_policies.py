"""The AccessPolicy reconciler: reports in each policy's own status whether the API server can
apply it, so that an administrator sees a mistake where they made it (`kubectl get ap`, `kubectl
wait --for=condition=Ready`, an Event) instead of in an API server's log.

A policy is `Ready` when it parses as the API server parses it (the same model,
lessor.resources.access_policy; the schema in the CRD cannot express every rule, so a policy
kube-apiserver accepted can still be one the API server skips) and every Secret its static tokens
name holds the key named. The API server reads those Secrets at each authentication, so a missing
one is not fatal to the policy's other methods, but tokens kept there will not work: that is worth
a False. Secrets are read, not watched (a watch would cache every Secret of the namespace, the
leases' kubeconfigs included), so the verdict is refreshed every minute as well as on each change
of the policy.
"""

from __future__ import annotations

import logging

from pydantic import ValidationError

from lessor.operator.core.conditions import find, with_condition
from lessor.operator.core.kinds import ACCESS_POLICIES, SECRETS
from lessor.operator.core.writes import write_status
from lessor.operator.runtime.client import KubeClient, NotFoundError
from lessor.operator.runtime.controller import Controller, Result
from lessor.operator.runtime.events import EventRecorder
from lessor.operator.runtime.informer import Informer
from lessor.operator.wiring.context import Context
from lessor.protocol.json_object import Json
from lessor.protocol.validation_errors import describe
from lessor.resources.access_policy import AccessPolicy, AccessPolicyStatus
from lessor.resources.base import READY

log = logging.getLogger(__name__)

RECHECK_SECONDS = 60.0


def setup(context: Context) -> Controller:
    policies = context.informer(ACCESS_POLICIES)
    reconciler = AccessPolicyReconciler(context.client, policies, context.events)
    return context.controller(AccessPolicy, reconciler.reconcile).watch(policies)


class AccessPolicyReconciler:
    def __init__(self, client: KubeClient, policies: Informer, events: EventRecorder) -> None:
        self.client = client
        self.policies = policies
        self.events = events

    async def reconcile(self, key: str) -> Result:
        obj = self.policies.store.get(key)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return Result()
        # Read in parts, not as one AccessPolicy: an administrator may have written the spec
        # wrong, and saying so in the status is this reconciler's job.
        try:
            status = AccessPolicyStatus.model_validate(obj.get("status") or {})
        except ValidationError:
            status = AccessPolicyStatus()  # only this reconciler writes it: start it again
        before = find(status.conditions, READY)
        ok, reason, message = await self._verdict(obj)
        status.conditions = with_condition(
            status.conditions,
            READY,
            ok,
            reason,
            message,
            generation=obj["metadata"].get("generation"),
        )
        obj = await write_status(self.client, ACCESS_POLICIES, obj, status)
        if before is None or (before.status, before.reason) != ("True" if ok else "False", reason):
            if not ok:
                log.warning("access policy %s: %s: %s", key, reason, message)
            await self.events.record(obj, "Normal" if ok else "Warning", reason, message)
        return Result(requeue_after=RECHECK_SECONDS)

    async def _verdict(self, obj: Json) -> tuple[bool, str, str]:
        try:
            policy = AccessPolicy.model_validate(obj)
        except ValidationError as error:
            return invalid(error)
        namespace = obj["metadata"]["namespace"]
        for index, entry in enumerate(policy.spec.auth.static_tokens):
            ref = entry.secret_ref
            try:
                secret = await self.client.get(SECRETS.path(namespace, ref.name))
            except NotFoundError:
                missing = f"Secret {ref.name} does not exist"
            else:
                if ref.key in (secret.get("data") or {}):
                    continue
                missing = f"Secret {ref.name} has no key {ref.key}"
            return (
                False,
                "SecretMissing",
                f"spec.auth.staticTokens[{index}]: {missing}; that token is refused until it does",
            )
        return True, "Valid", "the API server applies this policy"


def invalid(error: ValidationError) -> tuple[bool, str, str]:
    """The verdict on a policy the model refuses. kube-apiserver enforces the same rules from the
    CRD's schema, so this is a policy stored under an older CRD, or with a rule the schema lacks."""
    return False, "Invalid", f"the API server ignores this policy: {describe(error)}"
