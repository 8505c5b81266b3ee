"""Cluster backends: one contract (base.py), three implementations (local, kubernetes,
simulated). The portal talks to them only through :func:`get_backend`."""
