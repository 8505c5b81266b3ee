"""Simplified Chinese: a complete catalog, and the pages and messages in Chinese for a person who
chose it (English stays as it was for everyone else)."""

from __future__ import annotations

import ast
import gettext
import re
from collections import Counter
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.utils import translation

from core.reasons import plain
from scheduling import reasons as S
from scheduling.models import Cluster, PriorityClass, Queue
from tenants import reasons as T
from workloads import reasons as W
from workloads import services
from workloads.choices import State
from workloads.models import Workload

pytestmark = pytest.mark.django_db

LC_MESSAGES = Path(settings.BASE_DIR) / "locale" / "zh_Hans" / "LC_MESSAGES"
PLACEHOLDER = re.compile(r"%\(\w+\)[sdr]|%[sdr]|%%|\{\{ *\w+ *\}\}")
ENTRY_LINE = re.compile(r'^(msgctxt|msgid_plural|msgid|msgstr(?:\[\d+\])?) (".*")$')


# --- The catalog -------------------------------------------------------------------------------


def catalog_entries() -> list[dict[str, Any]]:
    """The .po's entries: flags, msgctxt, msgid, msgid_plural and the msgstr forms."""
    entries: list[dict[str, Any]] = []
    entry: dict[str, Any] | None = None
    key = ""
    for raw in (LC_MESSAGES / "django.po").read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line:
            entry = None
            continue
        if line.startswith("#~"):  # an obsolete entry: not part of the catalog
            continue
        if entry is None:
            entry = {"flags": [], "msgstr": {}}
            entries.append(entry)
        if line.startswith("#,"):
            entry["flags"] += [flag.strip() for flag in line[2:].split(",")]
        elif line.startswith("#"):
            continue
        elif match := ENTRY_LINE.match(line):
            key = match[1]
            value = ast.literal_eval(match[2])
            if key.startswith("msgstr"):
                entry["msgstr"][key] = value
            else:
                entry[key] = value
        elif line.startswith('"'):
            if key.startswith("msgstr"):
                entry["msgstr"][key] += ast.literal_eval(line)
            else:
                entry[key] += ast.literal_eval(line)
    return entries


def messages() -> list[dict[str, Any]]:
    return [e for e in catalog_entries() if e.get("msgid")]


def test_the_header_declares_simplified_chinese_with_one_plural_form() -> None:
    (header,) = [e for e in catalog_entries() if e.get("msgid") == ""]
    text = header["msgstr"]["msgstr"]
    assert "Language: zh_Hans\n" in text
    assert "charset=UTF-8" in text
    assert "Plural-Forms: nplurals=1; plural=0;" in text
    assert "fuzzy" not in header["flags"]


def test_every_message_is_translated_and_none_is_fuzzy() -> None:
    entries = messages()
    assert len(entries) > 500
    fuzzy = [e["msgid"] for e in entries if "fuzzy" in e["flags"]]
    assert fuzzy == []
    untranslated = [e["msgid"] for e in entries if not e["msgstr"] or not all(e["msgstr"].values())]
    assert untranslated == []
    plural = [e for e in entries if "msgid_plural" in e]
    assert plural, "the catalog has plural messages"
    assert all(set(e["msgstr"]) == {"msgstr[0]"} for e in plural)
    singular = [e for e in entries if "msgid_plural" not in e]
    assert all(set(e["msgstr"]) == {"msgstr"} for e in singular)


def test_every_translation_keeps_the_placeholders() -> None:
    wrong = []
    for entry in messages():
        wanted = Counter(PLACEHOLDER.findall(entry["msgid"]))
        names = set(wanted)
        if "msgid_plural" in entry:
            names |= set(PLACEHOLDER.findall(entry["msgid_plural"]))
        for text in entry["msgstr"].values():
            found = Counter(PLACEHOLDER.findall(text))
            if set(found) != names or found["%%"] != wanted["%%"]:
                wrong.append((entry["msgid"], text))
            if text.count("<a ") != entry["msgid"].count("<a "):
                wrong.append((entry["msgid"], text))
    assert wrong == []


def test_the_compiled_catalog_matches_the_po_file() -> None:
    """The .mo is committed beside the .po (no gettext needed on a fresh machine)."""
    with open(LC_MESSAGES / "django.mo", "rb") as file:
        compiled = gettext.GNUTranslations(file)
    stale = []
    for entry in messages():
        context, msgid = entry.get("msgctxt"), entry["msgid"]
        if "msgid_plural" in entry:
            got = compiled.ngettext(msgid, entry["msgid_plural"], 1)
            want = entry["msgstr"]["msgstr[0]"]
        elif context is not None:
            got, want = compiled.pgettext(context, msgid), entry["msgstr"]["msgstr"]
        else:
            got, want = compiled.gettext(msgid), entry["msgstr"]["msgstr"]
        if got != want:
            stale.append(msgid)
    assert stale == [], "run: manage.py compilemessages -l zh_Hans"


# --- Reasons -----------------------------------------------------------------------------------

QUOTA = T.QUOTA_EXHAUSTED(
    kind="class", tenant="ML-101", used="1", limit="1", what="gpus", asked="1"
)
MEMBER_QUOTA = T.MEMBER_QUOTA_EXHAUSTED(
    kind="department", tenant="CS", used="2", limit="2", what="jobs", asked="1"
)
WORKER_FAILED = S.WITH_DETAIL(reason=S.WORKER_EXITED(n=0, code=1), detail="boom")
# (reason, in English, in Chinese)
REASONS = [
    (
        W.WAITING_FOR_QUOTA(why=QUOTA),
        "waiting for quota: class ML-101: 1 of 1 GPUs in use (asked for 1)",
        "等待配额：班级 ML-101：GPU 已用 1 / 1（申请 1）",
    ),
    (
        W.WAITING_FOR_QUOTA(why=MEMBER_QUOTA),
        "waiting for quota: department CS: you use 2 of your 2 jobs (asked for 1)",
        "等待配额：院系 CS：你的 作业 已用 2 / 2（申请 1）",
    ),
    (
        S.NO_SUCH_GPU(what=""),
        "waiting for capacity: this cluster has no GPU right now",
        "等待资源：本集群目前没有 GPU",
    ),
    (
        S.NO_CAPACITY(what=S.FREE_GPUS(n=2, models="A100 ")),
        "waiting for capacity: no node has 2 free A100 GPUs now",
        "等待资源：目前没有节点有 2 块空闲的 A100 GPU",
    ),
    (
        W.WAITING_FOR_WINDOW(windows=W.windows([{"day": 1, "start": "14:00", "end": "16:00"}])),
        "waiting for the grant's time window (Tue 14:00–16:00)",
        "等待授权的开放时段（星期二 14:00–16:00）",
    ),
    (W.stopped_by(None), "stopped by the portal", "由平台停止"),
    (W.STOPPED_BY(who="alice"), "stopped by alice", "由 alice 停止"),
    (
        W.RESTARTING_AFTER_FAILURE(why=WORKER_FAILED, a=2, b=3),
        "restarting after a failure (worker 0 exited with code 1: boom): attempt 2 of 3",
        "失败后重启（工作进程 0 已退出，退出码 1: boom）：第 2 次尝试，共 3 次",
    ),
    (
        W.WAITING(why=W.QUEUE_CLOSED(queue="gpu-a")),
        "waiting: queue gpu-a is closed",
        "等待中：队列 gpu-a 已关闭",
    ),
    (W.RUNNING(), "running", "运行中"),
]


def test_reasons_read_in_chinese() -> None:
    with translation.override("zh-hans"):
        assert [reason.render() for reason, _, _ in REASONS] == [zh for _, _, zh in REASONS]


def test_reasons_are_unchanged_in_english() -> None:
    samples = [
        *((reason, en) for reason, en, _ in REASONS),
        (
            S.NO_CAPACITY(what=S.FREE_CPU_MEMORY(cores="4", mib=16384)),
            "waiting for capacity: no node has 4 CPU cores and 16384 MiB of memory free now",
        ),
        (
            S.NO_CAPACITY(what=S.FREE_GPU_SHARE(models="A100 ", pct="50", mib=8192)),
            "waiting for capacity: no node has a A100 GPU with 50% compute and 8192 MiB free now",
        ),
        (
            S.TOO_BIG_CPU(n="64", m="16"),
            "bigger than any node: asks 64 CPU cores, the largest node has 16",
        ),
        (
            S.WITH_DETAIL(reason=S.APP_EXITED(app="JupyterLab", code=1), detail="Traceback"),
            "JupyterLab exited with code 1: Traceback",
        ),
        (
            S.WORKER_KILLED(n=1, signal="SIGKILL", code=-9),
            "worker 1 was killed by SIGKILL (exit code -9)",
        ),
        (
            S.FAILED_AFTER_RESTARTS(n=2, why=plain("OOMKilled")),
            "failed after 2 restarts: OOMKilled",
        ),
        (plain("something the portal has no code for"), "something the portal has no code for"),
    ]
    assert [reason.text() for reason, _ in samples] == [en for _, en in samples]
    with translation.override("en"):
        assert [reason.render() for reason, _ in samples] == [en for _, en in samples]


def test_a_reason_is_stored_in_english_whatever_the_launching_language(
    world, catalog, backend, run
) -> None:
    world.quota(world.class_a, gpus=Decimal(1))
    with translation.override("zh-hans"):
        run(
            services.launch_environment,
            actor=world.bob,
            template=catalog.jupyter,
            flavor=catalog.gpu,
        )
        second = run(
            services.launch_environment,
            actor=world.bob,
            template=catalog.jupyter,
            flavor=catalog.gpu,
        )
    assert second.reason == "waiting for quota: class ML-101: 1 of 1 GPUs in use (asked for 1)"


# --- Pages -------------------------------------------------------------------------------------


@pytest.fixture
def run(django_capture_on_commit_callbacks: Any) -> Callable[..., Any]:
    """Call a service with its after-commit tasks run, and return the fresh workload."""

    def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        with django_capture_on_commit_callbacks(execute=True):
            result = fn(*args, **kwargs)
        if isinstance(result, Workload):
            result.refresh_from_db()
        return result

    return call


@pytest.fixture
def chinese(client: Any) -> Iterator[Callable[[Any], Any]]:
    """``chinese(user)``: the test client signed in as ``user``, who chose Simplified Chinese."""

    def sign_in(user: Any) -> Any:
        user.language = "zh-hans"
        user.save(update_fields=["language"])
        client.force_login(user)
        return client

    yield sign_in
    translation.activate(settings.LANGUAGE_CODE)


def get_page(client: Any, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, url
    return response.content.decode()


def shows(html: str, *, chinese: list[str], not_english: list[str]) -> None:
    assert '<html lang="zh-hans">' in html
    missing = [word for word in chinese if word not in html]
    assert missing == []
    left = [words for words in not_english if words in html]
    assert left == []


def test_home_in_chinese(world, chinese) -> None:
    shows(
        get_page(chinese(world.bob), "/"),
        chinese=["欢迎，bob", "你的所属", "班级", "学生", "修改密码", "我的工作负载", "退出登录"],
        not_english=["Welcome", "Where you belong", "Change password", "Sign out"],
    )


def test_the_app_center_in_chinese(world, catalog, chinese) -> None:
    catalog.grant.windows = [{"day": 1, "start": "14:00", "end": "16:00"}]
    catalog.grant.save(update_fields=["windows"])
    shows(
        get_page(chinese(world.bob), "/apps/"),
        chinese=["应用中心", "启动", "规格", "开放时段：星期二 14:00–16:00", "每次会话最长"],
        not_english=["App Center", "Launch", "Up to ", "minutes a session"],
    )


def test_the_workload_list_and_a_queued_workload_in_chinese(
    world, catalog, backend, run, chinese
) -> None:
    world.quota(world.class_a, gpus=Decimal(1))
    first = run(
        services.launch_environment, actor=world.bob, template=catalog.jupyter, flavor=catalog.gpu
    )
    second = run(
        services.launch_environment, actor=world.bob, template=catalog.jupyter, flavor=catalog.gpu
    )
    assert (first.state, second.state) == (State.STARTING, State.QUEUED)
    client = chinese(world.bob)

    listing = get_page(client, "/workloads/")
    shows(
        listing,
        chinese=["环境与作业", "提交训练任务", "启动中", "排队中", "等待配额：班级 ML-101"],
        not_english=["Environments and jobs", "Submit a training job", "waiting for quota"],
    )
    assert 'data-state="Queued">排队中</span>' in listing

    detail = get_page(client, f"/workloads/{second.pk}/")
    shows(
        detail,
        chinese=[
            "等待配额：班级 ML-101：GPU 已用 1 / 1（申请 1）",
            "所有者",
            "规格",
            "时间线",
            "以 1 GPU 规格启动了 JupyterLab",
            "<strong>排队中</strong>",
        ],
        not_english=["Owner", "Timeline", "waiting for quota", "launched JupyterLab"],
    )
    assert 'data-state="Queued">排队中</span>' in detail


def test_a_service_refusal_reads_in_chinese(world, catalog, chinese) -> None:
    client = chinese(world.charlie)
    response = client.post("/apps/jupyter/launch/", {"flavor": catalog.small.pk}, follow=True)
    html = response.content.decode()
    assert "你没有 JupyterLab 的授权" in html
    assert "is not granted to you" not in html


def test_the_account_pages_in_chinese(world, chinese) -> None:
    client = chinese(world.bob)
    shows(
        get_page(client, "/account/"),
        chinese=["我的账号", "显示名称", "语言", "时区", "跟随浏览器", "保存"],
        not_english=["Your account", "Display name", "Time zone", "Browser default"],
    )
    shows(
        get_page(client, "/account/tokens/"),
        chinese=["个人 API 令牌", "创建令牌", "你的令牌", "还没有令牌。", "上次使用"],
        not_english=["Personal API tokens", "Create a token", "Your tokens", "No tokens yet."],
    )


def test_the_sign_in_page_in_chinese_from_the_language_cookie(client) -> None:
    client.cookies[settings.LANGUAGE_COOKIE_NAME] = "zh-hans"
    shows(
        get_page(client, "/login/"),
        chinese=["登录 Quanta", "用户名", "密码", "登录"],
        not_english=["Sign in to Quanta", "Username", "Password"],
    )
    translation.activate(settings.LANGUAGE_CODE)


def test_the_teachers_pages_in_chinese(world, catalog, chinese) -> None:
    client = chinese(world.alice)
    shows(
        get_page(client, "/teaching/"),
        chinese=["你的班级", "导入名单", "本学期 GPU 时", "成员"],
        not_english=["Your classes", "Import a roster", "GPU-hours this term"],
    )
    shows(
        get_page(client, "/teaching/ml-101/"),
        chinese=["正在运行", "成员及本学期 GPU 时", "添加成员", "授权模板", "学生", "教师"],
        not_english=["Running now", "Add a member", "Grant a template", "Members and GPU-hours"],
    )


def test_the_console_in_chinese(world, catalog, chinese) -> None:
    client = chinese(world.root)
    shows(
        get_page(client, "/console/"),
        chinese=[
            "控制台",
            "概览",
            "主机与 GPU",
            "租户与配额",
            "队列",
            "审计日志",
            "当前已分配的 GPU",
        ],
        not_english=["Hosts and GPUs", "Tenants and quotas", "GPUs allocated now", "Audit log"],
    )
    shows(
        get_page(client, "/console/tenants/"),
        chinese=["租户与配额", "编辑配额", "学校", "院系"],
        not_english=["Edit quota", "Per member"],
    )


def test_deleting_queues_and_priority_classes_reads_in_chinese(world, catalog, chinese) -> None:
    cluster = Cluster.objects.create(name="Queues", slug="queues", backend="local")
    default = Queue.objects.create(cluster=cluster, name="default")
    research = Queue.objects.create(cluster=cluster, name="research")
    research.tenants.set([world.class_a])
    big = Queue.objects.create(cluster=cluster, name="big")
    small = Queue.objects.create(cluster=cluster, name="small", parent=big)
    running = {"kind": "job", "name": "train", "owner": world.bob, "tenant": world.class_a}
    Workload.objects.create(**running, cluster=cluster, flavor=catalog.small, state=State.RUNNING)
    exam = PriorityClass.objects.create(name="exam", value=1000)
    catalog.grant.priority_class = exam
    catalog.grant.save()
    night = PriorityClass.objects.create(name="night", value=50)
    Workload.objects.create(
        **running, cluster=cluster, flavor=catalog.small, state=State.PENDING, priority=50
    )
    client = chinese(world.root)
    shows(
        get_page(client, f"/console/queues/{research.pk}/"),
        chinese=["删除队列 research？", ">删除</button>"],
        not_english=["Delete the queue", ">Delete</button>"],
    )
    refused = [
        (f"/console/queues/{default.pk}/delete/", "队列 default 是集群的默认队列"),
        (f"/console/queues/{big.pk}/delete/", "队列 big 是 small 的上级队列"),
        (f"/console/queues/{research.pk}/delete/", "队列 research 还有 2 个未结束的工作负载"),
        (f"/console/priority-classes/{exam.pk}/delete/", "有 1 个授权使用优先级 exam"),
        (f"/console/priority-classes/{night.pk}/delete/", "工作负载使用优先级 night"),
        (f"/console/queues/{small.pk}/delete/", "队列 small 已删除。"),
    ]
    for url, text in refused:
        html = client.post(url, follow=True).content.decode()
        shows(html, chinese=[text], not_english=["Queue ", "Priority class "])
    assert Queue.objects.count() == 3 and PriorityClass.objects.count() == 2


def test_english_stays_english(world, catalog, client) -> None:
    client.force_login(world.bob)
    html = get_page(client, "/apps/")
    assert '<html lang="en">' in html and "App Center" in html and "应用中心" not in html


def test_the_notebook_proxys_own_pages_follow_the_language() -> None:
    from workloads import proxy

    scope = {"cookies": {settings.LANGUAGE_COOKIE_NAME: "zh-hans"}, "headers": []}
    status, _headers, body = proxy.STARTING.render(scope)
    assert status == 503 and "你的环境正在启动" in body.decode()
    _status, _headers, body = proxy.STARTING.render({"headers": []})
    assert "Your environment is starting" in body.decode()
