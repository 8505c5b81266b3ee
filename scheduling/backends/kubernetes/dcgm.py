"""GPU utilisation on Kubernetes: NVIDIA's DCGM exporter series, read from Prometheus.

The exporter (a DaemonSet of the GPU operator) publishes per device
``DCGM_FI_DEV_GPU_UTIL`` (percent) and ``DCGM_FI_DEV_FB_USED`` (MiB), labelled with the
device's index (``gpu``), its node (``Hostname``, or ``node`` where a relabelling adds it) and,
with the kubelet's pod-resources mapping on, the pod that holds it (``pod``, ``namespace``;
``exported_pod`` / ``exported_namespace`` when Prometheus renamed them). One instant query per
series through the HTTP API (``/api/v1/query``); any failure is "no reading", never an error.
"""

from __future__ import annotations

import json
import logging
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

log = logging.getLogger(__name__)

UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"


@dataclass(frozen=True)
class DeviceSeries:
    """One device's values as the exporter labels them."""

    node: str
    index: int
    utilisation: int
    memory_used_mib: int = 0
    pod: str = ""
    namespace: str = ""


def query(base_url: str, expression: str, *, timeout: float) -> list[Mapping[str, object]]:
    """The result vector of an instant query; ``[]`` on any failure (logged)."""
    url = f"{base_url.rstrip('/')}/api/v1/query?{urllib.parse.urlencode({'query': expression})}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            body = json.loads(response.read())
    except (OSError, ValueError) as error:
        log.info("Prometheus at %s did not answer %s (%s): no reading", base_url, expression, error)
        return []
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(body, dict) or body.get("status") != "success" or not isinstance(data, dict):
        return []
    result = data.get("result")
    return [item for item in result if isinstance(item, dict)] if isinstance(result, list) else []


def read(
    base_url: str, *, node_labels: Sequence[str], timeout: float = 5.0
) -> tuple[DeviceSeries, ...]:
    """Every device Prometheus has DCGM series for now; ``()`` without a URL or an answer."""
    if not base_url:
        return ()
    used: dict[tuple[str, int], int] = {}
    for item in query(base_url, FB_USED, timeout=timeout):
        key = _device(item, node_labels)
        value = _value(item)
        if key is not None and value is not None:
            used[key] = int(value)
    series = []
    for item in query(base_url, UTIL, timeout=timeout):
        key = _device(item, node_labels)
        value = _value(item)
        if key is None or value is None:
            continue
        labels = _labels(item)
        series.append(
            DeviceSeries(
                node=key[0],
                index=key[1],
                utilisation=max(0, min(100, round(value))),
                memory_used_mib=used.get(key, 0),
                pod=labels.get("exported_pod") or labels.get("pod", ""),
                namespace=labels.get("exported_namespace") or labels.get("namespace", ""),
            )
        )
    return tuple(series)


def _labels(item: Mapping[str, object]) -> dict[str, str]:
    metric = item.get("metric")
    if not isinstance(metric, dict):
        return {}
    return {str(k): str(v) for k, v in metric.items()}


def _device(item: Mapping[str, object], node_labels: Sequence[str]) -> tuple[str, int] | None:
    labels = _labels(item)
    node = next((labels[name] for name in node_labels if labels.get(name)), "")
    try:
        index = int(labels.get("gpu", ""))
    except ValueError:
        return None
    return (node, index) if node else None


def _value(item: Mapping[str, object]) -> float | None:
    """The sample's value (``[time, "12.5"]``); None when it is missing or not a number."""
    value = item.get("value")
    if not isinstance(value, list) or len(value) != 2:
        return None
    try:
        number = float(value[1])
    except (TypeError, ValueError):
        return None
    return number if number == number else None  # NaN: no reading
