"""Releasing lessor: its version everywhere, its artifacts, and a check of the workflow that
publishes them (docs/releasing.md). `python -m release --help`.

A developer's and CI's tool, like bench/ and e2e/: not part of the lessor package, so it may use
e2e's image build and the build tools the package itself never needs.
"""
