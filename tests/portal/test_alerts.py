"""The shipped Prometheus alert rules and Grafana dashboard: well-formed, and every query reads
only series that the portal's /metrics exports (a renamed metric breaks this test, not the
on-call's pager)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from portal import metrics

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "quanta.json"

# What each Prometheus metric type is exported as.
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
    "gauge": ("",),
    "info": ("_info",),
    "unknown": ("",),
}
# Words of PromQL that are not series (functions and aggregations are followed by "(").
KEYWORDS = {
    "and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left",
    "group_right", "inf", "nan",
}  # fmt: skip
RULE_KEYS = {"alert", "expr", "for", "keep_firing_for", "labels", "annotations"}
DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")


def series_in(expr: str) -> set[str]:
    """The series names a PromQL expression reads."""
    text = re.sub(r'"(\\.|[^"\\])*"|\'(\\.|[^\'\\])*\'', "", expr)  # strings
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges
    text = re.sub(
        r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text
    )  # grouping
    names = set()
    for match in re.finditer(r"(?<![\w.$])[a-zA-Z_:][a-zA-Z0-9_:]*", text):
        rest = text[match.end() :].lstrip()
        if rest.startswith("(") or match.group() in KEYWORDS:
            continue
        names.add(match.group())
    return names


@pytest.fixture
def exported(client: Any, settings: Any, monkeypatch: pytest.MonkeyPatch, world: Any) -> set[str]:
    """Every series name /metrics can answer with (a family without samples yet counts by its
    type's names), the Celery ones included (a broker faked to answer)."""
    import redis

    class Pipeline:
        def llen(self, name: str) -> None:
            pass

        def execute(self) -> list[int]:
            return [0] * len(metrics.CELERY_QUEUES)

    class Broker:
        def pipeline(self, transaction: bool) -> Pipeline:
            return Pipeline()

        def close(self) -> None:
            pass

    monkeypatch.setattr(redis.Redis, "from_url", classmethod(lambda cls, url, **kw: Broker()))
    settings.REDIS_URL = "redis://broker.invalid:6379/0"
    response = client.get("/metrics", REMOTE_ADDR="127.0.0.1")
    assert response.status_code == 200
    names = set()
    for family in text_string_to_metric_families(response.content.decode()):
        names |= {family.name + suffix for suffix in SUFFIXES[family.type]}
        names |= {sample.name for sample in family.samples}
    assert "quanta_celery_queue_length" in names and "quanta_gpus" in names
    return names


def test_series_in_reads_promql_as_expected() -> None:
    expr = (
        'histogram_quantile(0.95, sum by (cluster, le) (rate(a_bucket{x="y{z}"}[5m]))) > 5 '
        "and on (cluster) b offset 5m or vector(1) * 1e3"
    )
    assert series_in(expr) == {"a_bucket", "b"}


def test_the_alert_rules_follow_the_rule_schema_and_read_exported_series(exported) -> None:
    document = yaml.safe_load(ALERTS.read_text())
    assert set(document) == {"groups"} and document["groups"]
    seen = set()
    for group in document["groups"]:
        assert set(group) <= {"name", "interval", "rules", "limit"}
        assert isinstance(group["name"], str) and group["rules"]
        for rule in group["rules"]:
            assert set(rule) <= RULE_KEYS, rule
            assert re.fullmatch(r"Quanta[A-Z][A-Za-z]+", rule["alert"])
            assert rule["alert"] not in seen, f"{rule['alert']} twice"
            seen.add(rule["alert"])
            assert DURATION.match(rule["for"]), rule["for"]
            assert rule["labels"]["severity"] in ("info", "warning", "critical")
            assert rule["annotations"]["summary"] and rule["annotations"]["description"]
            expr = rule["expr"]
            assert expr.count("(") == expr.count(")"), expr
            read = series_in(expr)
            assert read and read <= exported, f"{rule['alert']} reads {read - exported}"
    # What the issue asks to be alerted on.
    assert {
        "QuantaGpuAllocatedButIdle",
        "QuantaQueueStarvation",
        "QuantaNodesNotReporting",
        "QuantaSettlementBehind",
    } <= seen


def test_the_dashboard_is_a_grafana_dashboard_of_exported_series(exported) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["title"] and dashboard["schemaVersion"] >= 36
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert re.fullmatch(r"label_values\((\w+), cluster\)", variables["cluster"]["definition"])
    assert variables["cluster"]["definition"][13:-10] in exported
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    queried = set()
    for panel in dashboard["panels"]:
        assert panel["type"] in ("stat", "timeseries", "gauge", "table", "bargauge")
        assert panel["datasource"]["uid"] == "${datasource}"
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24 and grid["h"] > 0
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            read = series_in(target["expr"])
            assert read and read <= exported, f"{panel['title']} reads {read - exported}"
            queried |= read
    # The domain's series are all on it.
    for name in (
        "quanta_gpus", "quanta_gpus_allocated", "quanta_gpus_free", "quanta_gpus_stranded",
        "quanta_workloads", "quanta_queue_depth", "quanta_queue_oldest_wait_seconds",
        "quanta_workload_launch_to_running_seconds_bucket", "quanta_live_connections",
        "quanta_celery_queue_length", "quanta_billing_settlement_lag_seconds",
        "quanta_admission_session_duration_seconds_bucket", "quanta_http_requests_total",
    ):  # fmt: skip
        assert name in queried, name
