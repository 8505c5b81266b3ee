"""The workload tests' catalog and fake backend, for pages that show workloads."""

from tests.workloads.conftest import backend, catalog

__all__ = ["backend", "catalog"]
