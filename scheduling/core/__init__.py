"""The scheduler core: pure Python and numpy, no Django.

A snapshot of nodes, devices, queues and pending work goes in; placements and evictions come
out (scheduler.schedule). Modules by topic: model (the values), trace (CSV loading), cluster
(mutable state), predicates, policies and fragmentation (node and device ordering), placement
(one task at a time), scheduler (the session: enqueue, allocate, backfill, reclaim, preempt),
replay (trace replay and its metrics), variants (the paper's openb workload families), report and
plots (CSV, JSON, PNG).
"""
