"""The services of one worker process, built on first use: after gunicorn's fork, so nothing with
sockets or threads crosses it.

Each feature's resources type this container by a protocol of their own (LeaseServices,
SandboxServices, LoginServices), naming only what they use: this module is the one place that
knows every service, and the only one that imports them all.
"""

from __future__ import annotations

from functools import cached_property

from lessor.apiserver.auth.authenticator import Authenticator, Principal
from lessor.apiserver.leases.cluster_leases import LeaseService, watch_active_leases
from lessor.apiserver.leases.diagnostics import DiagnosticsService
from lessor.apiserver.leases.lease_events import LeaseEvents
from lessor.apiserver.leases.pools import PoolService
from lessor.apiserver.policy.store import PolicyStore
from lessor.apiserver.routes.settings import Settings
from lessor.apiserver.sandboxes.executions import ExecutionService
from lessor.apiserver.sandboxes.gate import SandboxGate
from lessor.apiserver.sandboxes.sandbox_leases import SandboxLeaseService
from lessor.apiserver.sandboxes.streams import SandboxStreamService
from lessor.apiserver.state.admission_limit import AdmissionLimiter
from lessor.apiserver.state.held_requests import HeldRequests
from lessor.apiserver.state.kube import Kube, kube
from lessor.apiserver.state.watched import WatchedObjects
from lessor.protocol.responses import SandboxLease as SandboxLeaseView
from lessor.resources.cluster import ClusterPool


class Services:
    """Per-process services, built on first use (after gunicorn's fork)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @property
    def kube(self) -> Kube:
        return kube(self.settings.kubeconfig, self.settings.namespace)

    @cached_property
    def policies(self) -> PolicyStore:
        return PolicyStore(lambda: self.kube)

    @cached_property
    def auth(self) -> Authenticator:
        signed = AdmissionLimiter(
            self.settings.ssh_signed_rate, self.settings.ssh_signed_burst, scope="ssh"
        )
        return Authenticator(
            self.policies,
            self.kube,
            self.settings.ssh_audiences,
            signed,
            session_key_ttl=self.settings.session_key_ttl,
            max_sessions_per_owner=self.settings.max_sessions_per_owner,
        )

    @cached_property
    def logins(self) -> AdmissionLimiter:
        """Each login writes a session record: a bucket per owner, as for creates."""
        return AdmissionLimiter(self.settings.login_rate, self.settings.login_burst, scope="login")

    @cached_property
    def leases(self) -> LeaseService:
        limiter = AdmissionLimiter(
            self.settings.lease_admission_rate,
            self.settings.lease_admission_burst,
            scope="cluster",
        )
        return LeaseService(
            self.kube,
            limiter,
            self.settings.default_max_concurrent_leases,
            self.watched_leases,
            self.watched_pools,
        )

    @cached_property
    def watched_leases(self) -> WatchedObjects:
        return watch_active_leases(lambda: self.kube)

    @cached_property
    def watched_pools(self) -> WatchedObjects:
        return WatchedObjects(lambda: self.kube, ClusterPool.crd.plural)

    @cached_property
    def lease_events(self) -> LeaseEvents:
        return LeaseEvents(self.kube, self.leases)

    @cached_property
    def diagnostics(self) -> DiagnosticsService:
        return DiagnosticsService(self.kube, self.leases)

    @cached_property
    def pools(self) -> PoolService:
        return PoolService(
            self.kube,
            self.watched_pools,
            self.watched_leases,
            self._sandbox_served,
            self._own_sandbox_leases,
        )

    def _sandbox_served(self) -> bool:
        return self.settings.agent_sandbox_mode == "external" and self.sandbox.verdict().served

    def _own_sandbox_leases(self, principal: Principal) -> list[SandboxLeaseView]:
        return self.sandbox_leases.list_mine(principal)  # built on first use

    @cached_property
    def sandbox_leases(self) -> SandboxLeaseService:
        limiter = AdmissionLimiter(
            self.settings.sandbox_admission_rate, self.settings.sandbox_admission_burst
        )
        return SandboxLeaseService(self.kube, limiter, self.settings.default_max_concurrent_leases)

    @cached_property
    def executions(self) -> ExecutionService:
        limiter = AdmissionLimiter(
            self.settings.execution_admission_rate,
            self.settings.execution_admission_burst,
            scope="execution",
        )
        return ExecutionService(
            self.kube, self.sandbox_leases, limiter, self.settings.max_command_bytes_per_lease
        )

    @cached_property
    def held(self) -> HeldRequests:
        return HeldRequests(self.settings.max_waits_per_identity)

    @cached_property
    def streams(self) -> SandboxStreamService:
        return SandboxStreamService(self.kube, self.sandbox_leases, self.policies, self.auth)

    @cached_property
    def sandbox(self) -> SandboxGate:
        external = self.settings.agent_sandbox_mode == "external"
        return SandboxGate(self.settings.agent_sandbox_mode, self.kube if external else None)
