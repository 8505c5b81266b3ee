"""The process's own Prometheus metrics: what is observed as it happens (requests, admission
sessions, launches reaching Running, live connections), in prometheus-client's default
registry. Every layer may observe them; ``/metrics`` (portal.metrics) exposes them with the
domain's gauges, which are read from the database at scrape time instead.

With ``PROMETHEUS_MULTIPROC_DIR`` set before the first import (docs/operations.md), each
process writes its values to files there and ``/metrics`` adds them up.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

# Seconds: a request, an admission session (a few ms to seconds on a large waiting line).
FAST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# Seconds from launch to Running: a notebook in seconds, a job waiting for GPUs in hours.
SLOW_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 14400.0)

HTTP_REQUESTS = Counter(
    "quanta_http_requests",
    "HTTP requests answered, by method, status code and view (the URL pattern's name).",
    ["method", "status", "view"],
)
HTTP_REQUEST_SECONDS = Histogram(
    "quanta_http_request_duration_seconds",
    "Time to answer an HTTP request, by method and view.",
    ["method", "view"],
    buckets=FAST_BUCKETS,
)
ADMISSION_SECONDS = Histogram(
    "quanta_admission_session_duration_seconds",
    "Duration of one admission session over a cluster's waiting line.",
    ["cluster"],
    buckets=FAST_BUCKETS,
)
LAUNCH_TO_RUNNING_SECONDS = Histogram(
    "quanta_workload_launch_to_running_seconds",
    "Time from a workload's launch to its first Running, by cluster and kind.",
    ["cluster", "kind"],
    buckets=SLOW_BUCKETS,
)
LIVE_CONNECTIONS = Gauge(
    "quanta_live_connections",
    "Open live-status WebSocket connections (/ws/live/).",
    multiprocess_mode="livesum",
)
