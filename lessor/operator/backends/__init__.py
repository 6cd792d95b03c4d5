"""Cluster backends behind one interface (see `base`)."""
