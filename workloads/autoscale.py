"""What the gateway measures of each endpoint, and how many replicas that asks for.

``Stats`` (in the web process, one per endpoint): requests in flight now and their recent
peak, and a sliding window of finished requests (rate, p50/p99 latency, errors). ``decide``
is the autoscaler's rule, pure: up at once when the peak in flight per replica is above the
target, down one step after ``SCALE_DOWN_QUIET_S`` below it, to zero after the endpoint's
``scale_to_zero_after_s`` without a request where its minimum (raised by its schedule,
``scheduling.serving.min_replicas_at``) is 0. ``apply_schedules`` is the beat's half: it
raises endpoints to their schedule's minimum and scales idle ones to zero, from the database
alone (a portal with several web processes, or none that saw a request).
"""

from __future__ import annotations

import datetime as dt
import math
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from django.utils import timezone

from scheduling.backends.base import ScalingBackend
from scheduling.backends.registry import get_backend
from scheduling.serving import ServingTarget, min_replicas_at
from workloads.choices import HOLDING, State
from workloads.models import ServingEndpoint
from workloads.specs import handle_for, serving_spec_for, windows

WINDOW_S = 60.0  # the sliding window of the page's rate, latency and errors
PEAK_S = 2.0  # the in-flight peak the autoscaler looks at
SCALE_DOWN_QUIET_S = 10.0
MAX_SAMPLES = 20000


@dataclass
class Stats:
    in_flight: int = 0
    last_request: float = 0.0  # time.time() of the last request
    samples: deque[tuple[float, float, bool]] = field(default_factory=deque)  # (at, s, ok)
    peaks: deque[tuple[float, int]] = field(default_factory=deque)  # (at, in flight)
    below_since: float | None = None  # since when fewer replicas would have done

    def started(self) -> None:
        now = time.time()
        self.in_flight += 1
        self.last_request = now
        self.peaks.append((now, self.in_flight))

    def finished(self, seconds: float, ok: bool) -> None:
        now = time.time()
        self.in_flight -= 1
        self.samples.append((now, seconds, ok))
        if len(self.samples) > MAX_SAMPLES:
            self.samples.popleft()
        self._trim(now)

    def _trim(self, now: float) -> None:
        while self.samples and self.samples[0][0] < now - WINDOW_S:
            self.samples.popleft()
        while self.peaks and self.peaks[0][0] < now - PEAK_S:
            self.peaks.popleft()

    def peak(self) -> int:
        self._trim(time.time())
        return max([self.in_flight, *(n for _at, n in self.peaks)])

    def summary(self) -> dict[str, Any]:
        now = time.time()
        self._trim(now)
        latencies = sorted(s for _at, s, _ok in self.samples)
        span = min(WINDOW_S, now - self.samples[0][0]) if self.samples else 0.0
        return {
            "in_flight": self.in_flight,
            "requests": len(latencies),
            "rate": round(len(latencies) / max(span, 1.0), 2),
            "p50_ms": _percentile_ms(latencies, 0.50),
            "p99_ms": _percentile_ms(latencies, 0.99),
            "errors": sum(1 for _at, _s, ok in self.samples if not ok),
        }


def _percentile_ms(sorted_seconds: list[float], q: float) -> float | None:
    if not sorted_seconds:
        return None
    index = min(len(sorted_seconds) - 1, max(0, math.ceil(q * len(sorted_seconds)) - 1))
    return round(sorted_seconds[index] * 1000, 2)


_stats: dict[int, Stats] = {}


def stats_for(endpoint_id: int) -> Stats:
    found = _stats.get(endpoint_id)
    if found is None:
        found = _stats[endpoint_id] = Stats()
    return found


def forget() -> None:
    _stats.clear()


def minimum_now(endpoint: ServingEndpoint, now: dt.datetime | None = None) -> int:
    return min_replicas_at(
        endpoint.min_replicas,
        windows(endpoint),
        now or timezone.now(),
        timezone.get_current_timezone(),
    )


def decide(
    *,
    current: int,
    peak_in_flight: int,
    target: int,
    minimum: int,
    maximum: int,
    idle_s: float,
    zero_after_s: float,
    below_for_s: float,
    quiet_s: float = SCALE_DOWN_QUIET_S,
    gpu_utilisation: int | None = None,
    target_gpu: int = 0,
) -> int:
    """The replicas an endpoint should have now: enough for the requests in flight, and,
    with a GPU target where the utilisation is known, enough to bring it to the target."""
    needed = _needed(current, peak_in_flight, target, gpu_utilisation, target_gpu)
    if minimum == 0 and peak_in_flight == 0 and idle_s >= zero_after_s:
        return 0
    floor = max(minimum, 1 if current > 0 or peak_in_flight else 0)
    if needed > current:
        return max(floor, min(maximum, needed))
    if needed < current and below_for_s >= quiet_s:
        return max(floor, min(maximum, current - 1))
    return max(floor, min(maximum, current))


def _needed(
    current: int, peak: int, target: int, gpu_utilisation: int | None, target_gpu: int
) -> int:
    needed = math.ceil(peak / max(target, 1))
    if target_gpu and gpu_utilisation is not None and current:
        needed = max(needed, math.ceil(current * gpu_utilisation / target_gpu))
    return needed


def step(
    endpoint: ServingEndpoint,
    current: int,
    now: float | None = None,
    *,
    gpu_utilisation: int | None = None,
) -> int:
    """``decide`` for ``endpoint`` from what this process measured of it (and the GPU
    utilisation of its replicas, where the backend knows it)."""
    now = now or time.time()
    stats = stats_for(endpoint.pk)
    peak = stats.peak()
    target_gpu = endpoint.target_gpu_utilisation
    needed = _needed(current, peak, endpoint.target_concurrency, gpu_utilisation, target_gpu)
    if needed < current:
        stats.below_since = stats.below_since or now
    else:
        stats.below_since = None
    last = stats.last_request or (
        endpoint.last_request_at.timestamp() if endpoint.last_request_at else 0.0
    )
    desired = decide(
        current=current,
        peak_in_flight=peak,
        target=endpoint.target_concurrency,
        minimum=minimum_now(endpoint),
        maximum=endpoint.max_replicas,
        idle_s=now - last if last else float("inf"),
        zero_after_s=endpoint.scale_to_zero_after_s,
        below_for_s=now - stats.below_since if stats.below_since else 0.0,
        quiet_s=SCALE_DOWN_QUIET_S,
        gpu_utilisation=gpu_utilisation,
        target_gpu=target_gpu,
    )
    if desired != current:
        stats.below_since = None
    return desired


def scale(endpoint: ServingEndpoint, replicas: int) -> bool:
    """Ask the endpoint's backend for ``replicas``; False where it cannot scale."""
    workload = endpoint.workload
    if workload is None or workload.state != State.RUNNING:
        return False
    backend = get_backend(workload.cluster)
    if not isinstance(backend, ScalingBackend):
        return False
    backend.scale(handle_for(workload), replicas)
    return True


def serving_targets() -> Iterator[ServingTarget]:
    """Every serving workload that holds replicas, as ``scheduling.serving`` asks for them
    (registered in ``WorkloadsConfig.ready``: the Kubernetes schedule task reads them)."""
    endpoints = ServingEndpoint.objects.filter(workload__state__in=HOLDING).select_related(
        "workload", "version__model"
    )
    for endpoint in endpoints:
        workload = endpoint.workload
        assert workload is not None
        serving = serving_spec_for(workload)
        if serving is not None:
            yield ServingTarget(
                cluster_id=workload.cluster_id, handle=handle_for(workload), serving=serving
            )


def apply_schedules(now: dt.datetime | None = None) -> int:
    """Beat: raise each running endpoint to its schedule's minimum, and scale to zero those
    whose minimum is 0 and that had no request for ``scale_to_zero_after_s``. Returns how
    many it changed."""
    now = now or timezone.now()
    changed = 0
    running = ServingEndpoint.objects.filter(workload__state=State.RUNNING).select_related(
        "workload__cluster", "version__model"
    )
    for endpoint in running:
        assert endpoint.workload is not None
        backend = get_backend(endpoint.workload.cluster)
        if not isinstance(backend, ScalingBackend):
            continue
        handle = handle_for(endpoint.workload)
        current = backend.replicas(handle).desired
        minimum = minimum_now(endpoint, now)
        last = endpoint.last_request_at or endpoint.workload.started_at or endpoint.created_at
        idle = (now - last).total_seconds()
        desired = current
        if current < minimum:
            desired = minimum
        elif (
            minimum == 0
            and current > 0
            and idle >= endpoint.scale_to_zero_after_s
            and stats_for(endpoint.pk).in_flight == 0
        ):
            desired = 0
        if desired != current:
            backend.scale(handle, desired)
            changed += 1
    return changed
