"""Reasons are codes with parameters: every registered code renders in English exactly as its
template says and in Chinese translated, nested reasons and word parameters included; the
storage keeps code, parameters and English text, and the API returns all three."""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal
from types import ModuleType
from typing import Any

import pytest
from django.utils import translation

from core.reasons import TEXT, Reason, ReasonCode, ReasonError, plain, registry
from scheduling import reasons as S
from tenants import reasons as T
from tests.i18n.test_chinese import messages
from workloads import lifecycle, services
from workloads import reasons as W
from workloads.choices import State
from workloads.live import labelled, workload_state
from workloads.models import Workload

LEFT_OVER = re.compile(r"%\(\w+\)[sd]")
QUOTA = T.QUOTA_EXHAUSTED(
    kind="class", tenant="ML-101", used="1", limit="1", what="gpus", asked="1"
)
FAILURE = S.WITH_DETAIL(reason=S.WORKER_EXITED(n=0, code=1), detail="boom")

# Parameters that are reasons themselves (or lists of them), per code; every other parameter
# gets a sample value below (a word of its words, a count, or a plain value).
NESTED: dict[str, dict[str, Any]] = {
    "with_detail": {"reason": S.POD_FAILED(task="worker-0"), "detail": "boom"},
    "no_capacity": {"what": S.FREE_GPUS(n=2, models="A100 ")},
    "task_too_big": {"task": "j/0", "why": S.TOO_BIG_NEEDS(parts=[S.NEEDS_ONE_NODE()])},
    "too_big_needs": {
        "parts": [S.NEEDS_CPU(milli=64000, largest=16000), S.NEEDS_MEMORY(mib=9, largest=8)]
    },
    "needs_gpus": {"n": 8, "models": S.ANY_MODEL(), "most": 4},
    "lost_placement": {"why": S.PREEMPTED_FOR(job="j2")},
    "failed_after_restarts": {"n": 2, "why": S.POD_OOM(task="worker-1", code=137)},
    "restarting_after": {"why": S.POD_EVICTED(task="worker-0"), "n": 1, "most": 3},
    "not_ready_in_time": {"why": S.CANNOT_PULL(image="x:1", why="ErrImagePull")},
    "gave_up_after": {"reason": S.CANNOT_PULL(image="x:1", why="ImagePullBackOff"), "n": 301},
    "keeps_crashing": {"task": "worker-0"},
    "waiting_for_resources": {"why": S.UNSCHEDULABLE()},
    "running_simulated": {"where": S.THE_SIMULATED_CLUSTER()},
    "running_on": {"where": S.SOME_NODES(n=5, first="a, b, c")},
    "waiting_for_quota": {"why": QUOTA},
    "waiting_for_window": {
        "windows": W.windows(
            [
                {"day": 1, "start": "14:00", "end": "16:00"},
                {"day": 3, "start": "9:00", "end": "11:00"},
            ]
        )
    },
    "waiting": {"why": S.QUEUE_CAPABILITY(queue="gpu-a")},
    "restarting_after_failure": {"why": FAILURE, "a": 2, "b": 3},
}


def sample(spec: ReasonCode) -> dict[str, Any]:
    params: dict[str, Any] = dict(NESTED.get(spec.code, {}))
    for name in sorted(spec.names - params.keys()):
        if name in spec.words:
            params[name] = next(iter(spec.words[name]))
        elif name == spec.count:
            params[name] = 2
        else:
            params[name] = 7 if name in ("n", "m", "code") else f"v-{name}"
    return params


def english(value: Any, spec: ReasonCode, name: str) -> str:
    if isinstance(value, Reason):
        return value.text()
    if isinstance(value, list):
        return spec.separator.join(english(v, spec, name) for v in value)
    return spec.words.get(name, {}).get(value, str(value))


CODES = sorted(registry().values(), key=lambda spec: spec.code)


def test_each_layer_registers_its_codes() -> None:
    layers: list[ModuleType] = [S, T, W]
    declared = {
        value.code
        for module in layers
        for value in vars(module).values()
        if isinstance(value, ReasonCode)
    }
    assert declared <= set(registry())
    assert len(CODES) > 100 and TEXT in registry()


@pytest.mark.parametrize("spec", CODES, ids=lambda spec: spec.code)
def test_every_code_renders_in_english_and_in_chinese(spec: ReasonCode) -> None:
    params = sample(spec)
    reason = spec(**params)
    form = spec.template
    if spec.count is not None and params[spec.count] != 1:
        form = spec.plural or form
    filled = form % {name: english(value, spec, name) for name, value in params.items()}
    assert reason.text() == filled
    with translation.override("en"):
        assert reason.render() == filled
    with translation.override("zh-hans"):
        chinese = reason.render()
    assert not LEFT_OVER.search(filled) and not LEFT_OVER.search(chinese)
    if spec.code == TEXT:
        assert chinese == filled
    else:
        assert chinese != filled, f"{spec.code} is not translated"
    assert Reason.from_json(reason.to_json()) == reason


def test_every_template_is_in_the_catalog() -> None:
    known = {e["msgid"]: e.get("msgid_plural") for e in messages()}
    missing = [
        spec.code
        for spec in CODES
        if spec.code != TEXT and (spec.template not in known or known[spec.template] != spec.plural)
    ]
    assert missing == []


def test_nested_reasons_and_words_are_translated_in_the_same_language() -> None:
    reason = W.WAITING_FOR_QUOTA(why=QUOTA)
    with translation.override("zh-hans"):
        assert QUOTA.render() in reason.render()
        assert "班级" in reason.render() and "class" not in reason.render()
    window = W.WAITING_FOR_WINDOW(windows=NESTED["waiting_for_window"]["windows"])
    assert window.text() == "waiting for the grant's time window (Tue 14:00–16:00, Thu 9:00–11:00)"
    with translation.override("zh-hans"):
        assert "星期二 14:00–16:00" in window.render() and "星期四" in window.render()
    needs = S.TOO_BIG_NEEDS(parts=NESTED["too_big_needs"]["parts"])
    assert needs.text() == (
        "bigger than any node: needs 64000 milli-CPU (largest node 16000); 9 MiB (largest node 8)"
    )


def test_words_from_outside_stay_as_they_are() -> None:
    line = plain("RuntimeError: CUDA out of memory %(x)s")
    with translation.override("zh-hans"):
        assert line.render() == "RuntimeError: CUDA out of memory %(x)s"
    detail = S.WITH_DETAIL(reason=S.APP_EXITED(app="JupyterLab", code=1), detail="Traceback")
    with translation.override("zh-hans"):
        assert detail.render() == "JupyterLab 已退出，退出码 1: Traceback"


def test_a_typo_in_a_parameter_fails_at_call_time() -> None:
    with pytest.raises(ReasonError):
        W.STOPPED_BY(whom="alice")
    with pytest.raises(ReasonError):
        W.IDLE_FOR()
    with pytest.raises(ReasonError):
        S.FREE_GPUS(n="two", models="")  # counts are ints
    with pytest.raises(ReasonError):
        W.STOPPED_BY(who=object())


def test_a_plural_follows_its_count() -> None:
    assert S.FAILED_AFTER_RESTARTS(n=1, why=S.FAILED()).text() == "failed after 1 restart: failed"
    assert S.STARTING_REPLICAS(n=3).text() == "starting 3 replicas"


# --- storage and the API -----------------------------------------------------------------------


@pytest.fixture
def run(django_capture_on_commit_callbacks: Any) -> Callable[..., Any]:
    def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        with django_capture_on_commit_callbacks(execute=True):
            result = fn(*args, **kwargs)
        if isinstance(result, Workload):
            result.refresh_from_db()
        return result

    return call


@pytest.mark.django_db
def test_a_reason_is_stored_as_code_params_and_english_text(world, catalog, backend, run) -> None:
    world.quota(world.class_a, gpus=Decimal(1))
    run(services.launch_environment, actor=world.bob, template=catalog.jupyter, flavor=catalog.gpu)
    with translation.override("zh-hans"):
        second = run(
            services.launch_environment,
            actor=world.bob,
            template=catalog.jupyter,
            flavor=catalog.gpu,
        )
    assert second.reason == "waiting for quota: class ML-101: 1 of 1 GPUs in use (asked for 1)"
    assert second.reason_code == "waiting_for_quota"
    assert second.reason_params == {
        "why": {
            "code": "quota_exhausted",
            "params": {
                "kind": "class",
                "tenant": "ML-101",
                "used": "1",
                "limit": "1",
                "what": "gpus",
                "asked": "1",
            },
        }
    }
    event = second.events.get(to_state=State.QUEUED)
    assert (event.reason_code, event.reason) == ("waiting_for_quota", second.reason)
    assert W.render_for(second, "zh-hans") == "等待配额：班级 ML-101：GPU 已用 1 / 1（申请 1）"


@pytest.mark.django_db
def test_the_api_returns_the_code_the_params_and_the_english_text(
    world, catalog, backend, api, run
) -> None:
    workload = run(
        services.launch_environment, actor=world.bob, template=catalog.jupyter, flavor=catalog.small
    )
    body = api(world.bob).get(f"/api/v1/workloads/{workload.pk}/").json()
    assert (body["reason"], body["reason_code"], body["reason_params"]) == (
        "starting on gpu-host",
        "starting_on",
        {"nodes": "gpu-host"},
    )
    events = api(world.bob).get(f"/api/v1/workloads/{workload.pk}/events/").json()
    assert events[0]["reason_code"] == "launched"
    assert events[0]["reason_params"] == {"template": "JupyterLab", "flavor": catalog.small.name}
    assert events[0]["reason"] == f"launched JupyterLab with {catalog.small.name}"
    assert events[-1]["reason"] == "starting on gpu-host"


@pytest.mark.django_db
def test_a_plain_string_is_stored_as_text_and_an_old_row_reads_as_it_is(world, catalog) -> None:
    workload = Workload.objects.create(
        name="old",
        owner=world.bob,
        tenant=world.class_a,
        cluster=catalog.cluster,
        flavor=catalog.small,
        reason="something written before codes",
    )
    assert W.render_for(workload, "zh-hans") == "something written before codes"
    assert lifecycle.transition(workload, State.QUEUED, reason="image quanta/x not found")
    workload.refresh_from_db()
    assert (workload.reason_code, workload.reason_params, workload.reason) == (
        "text",
        {"text": "image quanta/x not found"},
        "image quanta/x not found",
    )


@pytest.mark.django_db
def test_live_status_renders_the_reason_from_code_and_params(world, catalog, backend, run) -> None:
    world.quota(world.class_a, gpus=Decimal(1))
    run(services.launch_environment, actor=world.bob, template=catalog.jupyter, flavor=catalog.gpu)
    second = run(
        services.launch_environment, actor=world.bob, template=catalog.jupyter, flavor=catalog.gpu
    )
    item = workload_state(Workload.objects.select_related("owner", "tenant").get(pk=second.pk))
    assert item["reason_code"] == "waiting_for_quota"
    assert W.render_for(item, "zh-hans") == "等待配额：班级 ML-101：GPU 已用 1 / 1（申请 1）"
    assert W.render_for(item, "en") == item["reason"]
    assert labelled("zh-hans", item)["reason_text"] == W.render_for(item, "zh-hans")
