"""Pages hold up with long and Chinese names: a workload named with 600 unbroken characters
and one named in Chinese, in classes named so too, render within the viewport at 1,366 × 768
and on a phone (390 × 844), in English and in Chinese: the document is never wider than the
window, headings and tables stay inside it, state badges and buttons stay on one line, at
1,366 px "Sign out" sits on the line of the brand, and on the phone the top bar takes two rows
at most."""

from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING, Any

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import _manage, _server_env

if TYPE_CHECKING:
    from playwright.sync_api import Page

    from tests.browser.conftest import Portal, SignIn

LONG = "a" * 600
CHINESE = "深度学习课程第三次实验：卷积神经网络图像分类训练任务与超参数搜索结果对比分析报告"
SIZES = {"desktop": {"width": 1366, "height": 768}, "phone": {"width": 390, "height": 844}}

# People and work of these tests only (the demo's people keep their language and classes):
# a teacher, an admin and a student per language, two classes, two finished jobs.
SETUP = """
import datetime as dt, json
from django.utils import timezone
from scheduling.models import Cluster
from tenants import services
from tenants.choices import Role, TenantKind
from tenants.models import Tenant, User
from workloads.choices import State, WorkloadKind
from workloads.models import Flavor, Workload

admin = User.objects.get(username="admin")
ee = Tenant.objects.get(slug="ee")
people = {}
for name, extra in [("layout-t-en", {}), ("layout-t-zh", {"language": "zh-hans"}),
                    ("layout-a-en", {"is_superuser": True, "is_staff": True}),
                    ("layout-a-zh", {"is_superuser": True, "is_staff": True,
                                     "language": "zh-hans"}),
                    ("layout-s", {}), ("layout-s-zh", {"language": "zh-hans"})]:
    people[name] = User.objects.create_user(username=name, password=PASSWORD, **extra)
cluster = Cluster.objects.get(slug="local")
flavor = Flavor.objects.filter(is_active=True).order_by("gpus", "cpu_milli").first()
now = timezone.now()
made = {}
for key, slug, title in [("long", "layout-long", LONG), ("zh", "layout-zh", CHINESE)]:
    klass = services.create_tenant(
        actor=admin, kind=TenantKind.CLASS, name=slug, slug=slug, parent=ee)
    Tenant.objects.filter(pk=klass.pk).update(name=title)  # past the form's 200 characters
    for teacher in ("layout-t-en", "layout-t-zh"):
        services.set_membership(actor=admin, tenant=klass, user=people[teacher], role=Role.TEACHER)
    for student in ("layout-s", "layout-s-zh"):
        services.set_membership(actor=admin, tenant=klass, user=people[student], role=Role.STUDENT)
    made[key] = str(Workload.objects.create(
        kind=WorkloadKind.JOB, name=title, owner=people["layout-s"], tenant=klass, cluster=cluster,
        flavor=flavor, state=State.STOPPED, started_at=now - dt.timedelta(hours=2),
        finished_at=now - dt.timedelta(hours=1), reason=title,
    ).pk)
User.objects.filter(username__startswith="layout-s").update(display_name=CHINESE)
print("LAYOUT " + json.dumps(made))
"""

MEASURE = """() => {
  const view = window.innerWidth;
  const wide = (el) => { const box = el.getBoundingClientRect();
    return box.right > view + 1 || box.left < -1; };
  const lines = (el) => {  // the lines its visible text takes (hidden labels aside)
    const tops = new Set(), walk = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    for (let text = walk.nextNode(); text; text = walk.nextNode()) {
      if (!text.textContent.trim() || text.parentElement.closest(".visually-hidden")) continue;
      const r = document.createRange(); r.selectNodeContents(text);
      for (const box of r.getClientRects()) tops.add(Math.round(box.top));
    }
    return tops.size; };
  const outside = [...document.querySelectorAll("main h1, main h2, .card, .table-scroll, header")]
    .filter(wide).map((el) => el.tagName + "." + el.className);
  const wrapped = [...document.querySelectorAll(".state, .badge, main button, main .button")]
    .filter((el) => el.offsetParent !== null && el.textContent.trim() && lines(el) > 1)
    .map((el) => el.textContent.trim());
  // What sticks out: the innermost elements past the right edge (what to fix when it fails).
  const clipped = (el) => { for (let up = el.parentElement; up && up !== document.body;
    up = up.parentElement) { if (getComputedStyle(up).overflowX !== "visible") return true; }
    return false; };
  const past = [...document.querySelectorAll("body *")].filter((el) => wide(el) && !clipped(el))
    .filter((el) => ![...el.children].some(wide))
    .slice(0, 5).map((el) => `${el.tagName}.${el.className} ${el.getBoundingClientRect().width}`);
  return {view, document: document.documentElement.scrollWidth, outside, wrapped, past};
}"""


@pytest.fixture(scope="module")
def layout(portal: Portal) -> dict[str, str]:
    script = SETUP.replace("PASSWORD", json.dumps(portal.password))
    script = script.replace("LONG", json.dumps(LONG)).replace("CHINESE", json.dumps(CHINESE))
    env = _server_env(portal.data_dir, portal.password)
    for line in _manage(["shell", "-c", script], env, portal.log).splitlines():
        if line.startswith("LAYOUT "):
            return dict(json.loads(line.split(" ", 1)[1]))
    raise AssertionError("the layout setup printed nothing")


def check(page: Page, path: str, *, expect_text: str) -> None:
    page.goto(path)
    assert page.locator("main").inner_text().count(expect_text[:40]) or expect_text == "", path
    found: dict[str, Any] = page.evaluate(MEASURE)
    assert found["document"] <= found["view"], f"{path}: {found['document']} px wide in {found}"
    assert not found["outside"], f"{path}: wider than the window: {found['outside']}"
    assert not found["wrapped"], f"{path}: badges or buttons on several lines: {found['wrapped']}"


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("language", ["en", "zh"])
def test_long_and_chinese_names_stay_within_the_window(
    sign_in: SignIn, layout: dict[str, str], size: str, language: str
) -> None:
    teacher = sign_in(f"layout-t-{language}", next="/workloads/", viewport=SIZES[size])
    assert teacher.locator("html").get_attribute("lang") == (
        "en" if language == "en" else "zh-hans"
    )
    check(teacher, "/workloads/", expect_text=LONG)
    check(teacher, f"/workloads/{layout['long']}/", expect_text=LONG)
    check(teacher, f"/workloads/{layout['zh']}/", expect_text=CHINESE)
    check(teacher, "/teaching/layout-long/", expect_text=LONG)
    check(teacher, "/teaching/layout-zh/", expect_text=CHINESE)
    check(teacher, "/", expect_text="")
    admin = sign_in(f"layout-a-{language}", next="/console/tenants/", viewport=SIZES[size])
    check(admin, "/console/tenants/", expect_text=LONG)
    # The quota table scrolls inside its card; its "Edit quota" column stays in view.
    edit = admin.locator("td.sticky-end a[href$='/quota/']").first.bounding_box()
    assert edit and edit["x"] >= 0 and edit["x"] + edit["width"] <= SIZES[size]["width"]
    check(admin, "/", expect_text="")


@pytest.mark.parametrize("language", ["en", "zh"])
def test_sign_out_stays_on_the_brands_line_at_1366_px(
    sign_in: SignIn, layout: dict[str, str], language: str
) -> None:
    admin = sign_in(f"layout-a-{language}", next="/workloads/", viewport=SIZES["desktop"])
    brand = admin.locator("header .brand").bounding_box()
    out = admin.locator("header [data-role=sign-out]").bounding_box()
    assert brand and out
    assert abs((brand["y"] + brand["height"] / 2) - (out["y"] + out["height"] / 2)) < 8
    assert out["x"] + out["width"] <= SIZES["desktop"]["width"]
    # The pages that do not fit in the row are one click away, in "More".
    more = admin.locator("header details.nav-more")
    more.locator("summary").click()
    admin.locator("header details.nav-more a[href='/datasets/']").click()
    admin.wait_for_url("**/datasets/")


@pytest.mark.parametrize(
    ("username", "language"),
    [("layout-s", "en"), ("layout-s-zh", "zh"), ("layout-a-en", "en"), ("layout-a-zh", "zh")],
)
def test_the_top_bar_takes_at_most_two_rows_on_a_phone(
    sign_in: SignIn, layout: dict[str, str], username: str, language: str
) -> None:
    # A student (with a long Chinese name) and an admin (who has the Console link).
    page = sign_in(username, next="/", viewport=SIZES["desktop"])
    assert page.locator("html").get_attribute("lang") == ("en" if language == "en" else "zh-hans")
    one_row = page.locator("header.topbar").bounding_box()
    assert one_row
    page.set_viewport_size(SIZES["phone"])
    header = page.locator("header.topbar").bounding_box()
    assert header
    # Two rows share the bar's padding: under twice one row's height; three are well over it.
    assert header["height"] <= 2 * one_row["height"], (header, one_row)
    brand = page.locator("header .brand").bounding_box()
    out = page.locator("header [data-role=sign-out]").bounding_box()
    assert brand and out
    assert abs((brand["y"] + brand["height"] / 2) - (out["y"] + out["height"] / 2)) < 8
    assert out["x"] >= 0 and out["x"] + out["width"] <= SIZES["phone"]["width"]
    more = page.locator("header details.nav-more summary").bounding_box()
    assert more and more["x"] + more["width"] <= SIZES["phone"]["width"]
    assert more["y"] + more["height"] <= header["y"] + header["height"]


def test_a_phone_reaches_every_page_from_the_menu(sign_in: SignIn, layout: dict[str, str]) -> None:
    page = sign_in("layout-t-en", next="/workloads/", viewport=SIZES["phone"])
    page.locator("header details.nav-more summary").click()
    link = page.locator("header details.nav-more a[href='/usage/']")
    box = link.bounding_box()
    assert box and box["x"] >= 0 and box["x"] + box["width"] <= SIZES["phone"]["width"]
    link.click()
    page.wait_for_url("**/usage/")


def test_a_form_error_sits_under_its_own_field(sign_in: SignIn, layout: dict[str, str]) -> None:
    page = sign_in("student7", next="/workloads/new-job/", viewport=SIZES["desktop"])
    for choice in ("tenant", "flavor"):
        page.locator(f"select[name={choice}]").select_option(index=1)
    page.fill("input[name=command]", "python 'unclosed")  # the server cannot split it
    page.locator("main form button[type=submit]").click()
    error = page.locator(".field.has-error [role=alert]")
    expect(error).to_have_count(1)
    command = page.locator("input[name=command]").bounding_box()
    below = error.bounding_box()
    wrapper = page.locator(".field.has-error")
    assert wrapper.locator("input[name=command]").count() == 1  # same wrapper as its input
    assert command and below and below["y"] >= command["y"] + command["height"]
    # ...and above the next field's label, not under it.
    next_label = wrapper.locator("xpath=following-sibling::div[1]//label").first.bounding_box()
    assert next_label and below["y"] + below["height"] <= next_label["y"]


def test_the_teacher_confirms_before_stopping_several(
    sign_in: SignIn, portal: Portal, layout: dict[str, str]
) -> None:
    pk = portal.launch("student11", "jupyter-pytorch", "cpu-small")  # ML-101, teacher1's
    try:
        teacher = sign_in("teacher1", next="/workloads/?owner=student11%26state=active")
        teacher.locator(f'input[name=workload][value="{pk}"]').check()
        asked: list[str] = []

        def answer(dialog: Any, accept: bool) -> None:
            asked.append(dialog.message)
            dialog.accept() if accept else dialog.dismiss()

        teacher.once("dialog", lambda d: answer(d, False))
        teacher.locator("[data-role=stop-selected]").click()
        assert asked and "Stop the selected workloads?" in asked[0]
        assert portal.workload(pk)["state"] in ("Pending", "Queued", "Starting", "Running")
        teacher.once("dialog", lambda d: answer(d, True))
        teacher.locator("[data-role=stop-selected]").click()
        expect(teacher.locator(".messages")).to_contain_text("Stopping 1 workload.")
        assert teacher.url.endswith("/workloads/?owner=student11&state=active")
        assert portal.workload(pk)["state"] in ("Stopping", "Stopped")
    finally:
        with contextlib.suppress(AssertionError):  # already stopping: nothing to do
            portal.stop(pk)
