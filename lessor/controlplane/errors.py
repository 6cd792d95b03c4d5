"""Errors of the local control plane."""


class ControlPlaneError(RuntimeError):
    """The local control plane could not be built, started or reached; the message says why."""
