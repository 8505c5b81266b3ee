"""The admin console: overview, hosts (cordon), tenants and quotas, queues, catalog, audit."""

from __future__ import annotations

import re

import pytest

from core.models import AuditEvent
from scheduling.models import Allocation, Cluster, GpuDevice, Node, Queue
from tenants.models import Quota

pytestmark = pytest.mark.django_db

OPERATOR_PAGES = ["/console/", "/console/hosts/", "/console/queues/", "/console/catalog/"]


def hold(workload, device, milli: int, memory: int = 0) -> Allocation:
    return Allocation.objects.create(
        workload=workload, node=device.node, device=device, gpu_milli=milli, gpu_memory_mib=memory
    )


def test_the_cluster_pages_are_for_superusers_only(world, catalog, signed_in) -> None:
    for user in (world.dean, world.alice, world.charlie):
        client = signed_in(user)
        for url in OPERATOR_PAGES:
            assert client.get(url).status_code == 403, (user, url)
    root = signed_in(world.root)
    for url in [*OPERATOR_PAGES, "/console/tenants/", "/console/audit/"]:
        assert root.get(url).status_code == 200, url


def test_signed_out_people_are_sent_to_sign_in(client) -> None:
    response = client.get("/console/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_the_overview_counts_allocated_and_stranded_gpus_and_flags_simulation(
    world, catalog, running, signed_in
) -> None:
    hold(running(world.bob, world.class_a, flavor=catalog.half), catalog.gpus[0], 500, 20000)
    sim = Cluster.objects.create(name="What-if", slug="what-if", backend="simulated")
    node = Node.objects.create(cluster=sim, name="sim-1", cpu_milli=8000, memory_mib=8192)
    GpuDevice.objects.create(node=node, index=0, model="V100", memory_mib=16384)
    page = signed_in(world.root).get("/console/").content.decode()
    lab = page[page.index('id="cluster-') : page.index("What-if")]
    assert "<strong>0.50 / 2</strong>" in lab  # half a GPU of two allocated
    assert "GPUs stranded on 1 partly used device" in lab
    assert "<td>A100</td>" in lab and '<td class="num">1.50</td>' in lab  # free
    what_if = page[page.index("What-if") :]
    assert "simulated" in what_if[:200] and "<strong>0 / 1</strong>" in what_if
    assert 'id="chart-lab" type="application/json"' in page
    assert "vendor/chart.js/chart.umd.min.js" in page and "js/charts.js" in page
    assert "cdn" not in page.lower()


def test_the_hosts_page_shows_each_gpus_use_and_who_holds_it(
    world, catalog, running, signed_in
) -> None:
    workload = running(world.bob, world.class_a, flavor=catalog.half)
    hold(workload, catalog.gpus[0], 500, 20480)
    page = signed_in(world.root).get("/console/hosts/").content.decode()
    gpu0 = page[page.index("GPU 0") : page.index("GPU 1")]
    assert "Compute 50 %" in gpu0 and "Memory 50 %" in gpu0
    assert f'href="/workloads/{workload.pk}/"' in gpu0 and "bob" in gpu0
    assert "free" in page[page.index("GPU 1") :]


def test_the_hosts_page_says_what_a_local_host_isolates(world, catalog, signed_in) -> None:
    catalog.node.labels = {
        "quanta.io/backend": "local",
        "quanta.io/sandbox": "bubblewrap",
        "quanta.io/limits": "cgroup-v1",
        "quanta.io/gpu-shares": "not-isolated",
    }
    catalog.node.save()
    page = signed_in(world.root).get("/console/hosts/").content.decode()
    assert "Workloads run in a bubblewrap sandbox" in page
    assert "CPU and memory limits: enforced by cgroup v1." in page
    assert "GPU shares: not isolated" in page

    catalog.node.labels = {"quanta.io/sandbox": "none", "quanta.io/limits": "rlimit",
                           "quanta.io/gpu-shares": "mps"}  # fmt: skip
    catalog.node.save()
    client = signed_in(world.root)
    client.cookies["django_language"] = "zh-hans"
    page = client.get("/console/hosts/", headers={"accept-language": "zh-hans"}).content.decode()
    assert "不在沙箱中运行" in page and "MPS" in page


def test_cordoning_from_the_hosts_page_is_audited_and_dean_cannot(
    world, catalog, signed_in
) -> None:
    url = f"/console/hosts/{catalog.node.pk}/cordon/"
    assert signed_in(world.dean).post(url).status_code == 403
    catalog.node.refresh_from_db()
    assert not catalog.node.cordoned

    client = signed_in(world.root)
    response = client.post(url, {"next": "/console/hosts/?cluster=lab"})
    assert response.status_code == 302
    assert response["Location"] == f"/console/hosts/?cluster=lab#node-{catalog.node.pk}"
    catalog.node.refresh_from_db()
    assert catalog.node.cordoned
    event = AuditEvent.objects.get(action="node.cordon")
    assert event.actor == world.root and event.target_id == str(catalog.node.pk)
    assert "cordoned" in client.get("/console/hosts/").content.decode()

    client.post(f"/console/hosts/{catalog.node.pk}/uncordon/", {"next": "https://evil.example/"})
    catalog.node.refresh_from_db()
    assert not catalog.node.cordoned and AuditEvent.objects.filter(action="node.uncordon").exists()
    assert client.get(url).status_code == 405  # a GET changes nothing


def test_dean_sees_the_tenant_tree_of_his_department_only(world, signed_in) -> None:
    page = signed_in(world.dean).get("/console/tenants/").content.decode()
    assert "<strong>CS</strong>" in page and "ML-101" in page and "DL-201" in page
    assert "<strong>EE</strong>" not in page and "<strong>Uni</strong>" not in page
    assert signed_in(world.alice).get("/console/tenants/").status_code == 403
    assert signed_in(world.charlie).get("/console/tenants/").status_code == 403


def test_over_use_is_flagged_in_the_tree(world, signed_in) -> None:
    world.quota(world.class_a, gpus=1)
    Quota.objects.filter(tenant=world.class_a).update(used_gpus=2)
    page = signed_in(world.root).get("/console/tenants/").content.decode()
    row = page[page.index("<strong>ML-101</strong>") :]
    row = row[: row.index("</tr>")]
    assert 'class="num over">2 / 1' in row and "badge bad" in row


def test_an_admin_edits_a_quota_in_his_subtree_through_the_form(world, signed_in) -> None:
    client = signed_in(world.dean)
    assert "In use" in client.get("/console/tenants/ml-101/quota/").content.decode()
    response = client.post("/console/tenants/ml-101/quota/", {"gpus": "4", "environments": "10"})
    assert response.status_code == 302
    quota = Quota.objects.get(tenant=world.class_a)
    assert quota.gpus == 4 and quota.environments == 10 and quota.jobs is None
    assert AuditEvent.objects.filter(action="quota.set", actor=world.dean).exists()
    bad = client.post("/console/tenants/ml-101/quota/", {"gpus": "-1"})
    assert bad.status_code == 200 and "greater than or equal to 0" in bad.content.decode()

    assert client.get("/console/tenants/ee/quota/").status_code == 404
    assert signed_in(world.alice).post("/console/tenants/ml-101/quota/", {}).status_code == 403
    assert signed_in(world.charlie).get("/console/tenants/ml-101/quota/").status_code == 404


def test_lowering_a_quota_below_use_is_saved_and_reported(world, signed_in) -> None:
    Quota.objects.filter(tenant=world.class_a).update(used_environments=3)
    response = signed_in(world.root).post(
        "/console/tenants/ml-101/quota/", {"environments": "1"}, follow=True
    )
    assert "now uses more than its limit of concurrent environments" in response.content.decode()


def test_the_audit_log_filters_by_action_and_is_scoped_like_the_api(world, signed_in) -> None:
    root = signed_in(world.root).get("/console/audit/?action=tenant.create").content.decode()
    assert root.count("<code>tenant.create</code>") == 5
    assert "<code>membership.set</code>" not in root

    dean = signed_in(world.dean).get("/console/audit/").content.decode()
    # A word of its own: the page's random CSRF token may hold the letters "EE".
    assert "ML-101" in dean and not re.search(r"\bEE\b", dean)
    assert signed_in(world.bob).get("/console/audit/").status_code == 403


def test_the_audit_log_is_paginated(world, signed_in) -> None:
    from core.audit import record

    for _ in range(60):
        record("test.event", actor=world.root, target=world.school)
    client = signed_in(world.root)
    first = client.get("/console/audit/?action=test.event").content.decode()
    assert first.count("<code>test.event</code>") == 50 and "Page 1 of 2" in first
    assert "?action=test.event&amp;page=2" in first
    second = client.get("/console/audit/?action=test.event&page=2").content.decode()
    assert second.count("<code>test.event</code>") == 10


def test_queues_and_the_catalog_list_their_key_facts(world, catalog, signed_in) -> None:
    Queue.objects.create(cluster=catalog.cluster, name="teaching", weight=3)
    Queue.objects.create(cluster=catalog.cluster, name="research", weight=1, reclaimable=False)
    client = signed_in(world.root)
    queues = client.get("/console/queues/").content.decode()
    assert "teaching" in queues and '<td class="num">75 %</td>' in queues
    page = client.get("/console/catalog/").content.decode()
    assert "JupyterLab" in page and "PyTorch" in page and "half GPU" in page
    assert "quanta/pytorch:2" in page and "50 % · 19.53 GiB" in page  # 20,000 MiB


def test_the_nav_shows_the_console_to_superusers_and_tenants_to_admins(world, signed_in) -> None:
    assert 'href="/console/"' in signed_in(world.root).get("/").content.decode()
    dean = signed_in(world.dean).get("/").content.decode()
    assert 'href="/console/tenants/"' in dean and 'href="/console/"' not in dean
    header = dean.split("</header>")[0]  # the home page's dashboard links there too
    assert header.count('href="/teaching/"') == 1
