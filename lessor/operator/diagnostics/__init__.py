"""Diagnostics bundles (spec 4.2.6): what a leased cluster looked like when its lease ended,
captured before teardown and kept in an object store for the lease's owner."""
