"""The admins' capacity what-if: a trace replayed on an inventory under several policies."""

from __future__ import annotations

import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from scheduling.models import Cluster, GpuDevice, Node, WhatIfRun

pytestmark = pytest.mark.django_db

NODES = "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
    f"n{i},32000,131072,4,A100\n" for i in range(4)
)
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + "".join(
    f"p{i},2000,4096,1,{250 if i % 2 else 1000}\n" for i in range(20)
)


def upload(name: str, text: str) -> SimpleUploadedFile:
    return SimpleUploadedFile(name, text.encode(), content_type="text/csv")


def post(client, **extra):
    body = {
        "pods": upload("pods.csv", PODS),
        "policies": ["random", "fgd-cpu"],
        "seeds": 2,
        **extra,
    }
    return client.post("/api/v1/whatif/", body, format="multipart")


def test_a_superuser_compares_policies_on_an_uploaded_node_list(
    world, api, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        response = post(api(world.root), nodes=upload("nodes.csv", NODES))
    assert response.status_code == 201, response.content
    run = api(world.root).get(f"/api/v1/whatif/{response.json()['id']}/").json()
    assert run["status"] == "done", run["error"]
    assert set(run["result"]["summary"]) == {"random", "fgd-cpu"}
    assert run["result"]["gpus"] == 16
    curve = run["result"]["curve"]
    assert {p["policy"] for p in curve} == {"random", "fgd-cpu"}
    assert all(0 <= p["allocated_pct"] <= 100 for p in curve)


def test_a_cluster_can_be_the_inventory(world, api, django_capture_on_commit_callbacks) -> None:
    cluster = Cluster.objects.create(name="Lab", slug="lab", backend="local")
    node = Node.objects.create(cluster=cluster, name="gpu-1", cpu_milli=64000, memory_mib=262144)
    for i in range(8):
        GpuDevice.objects.create(node=node, index=i, model="A100", memory_mib=40960)
    with django_capture_on_commit_callbacks(execute=True):
        response = post(api(world.root), cluster="lab")
    assert response.status_code == 201, response.content
    assert WhatIfRun.objects.get().status == "done"


@pytest.mark.parametrize(
    ("nodes", "pods", "words"),
    [
        ("sn,cpu_milli,memory_mib,gpu\nn0,1,1,1\n", PODS, "model"),
        (NODES, "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,-5,1,0,0\n", "line 2"),
        (NODES, "name,cpu_milli\n", "memory_mib"),
        (
            NODES,
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np0,1,1,1,1000,H100\n",
            "H100",
        ),
    ],
)
def test_a_bad_trace_gets_a_400_naming_the_file_line_or_column(world, api, nodes, pods, words):
    response = api(world.root).post(
        "/api/v1/whatif/",
        {
            "nodes": upload("nodes.csv", nodes),
            "pods": upload("pods.csv", pods),
            "policies": ["random"],
            "seeds": 1,
        },
        format="multipart",
    )
    assert response.status_code == 400
    assert words in str(response.json())
    assert not WhatIfRun.objects.exists()


def test_unknown_policies_and_too_many_seeds_get_a_400(world, api) -> None:
    assert (
        "policies"
        in post(api(world.root), nodes=upload("n.csv", NODES), policies=["psychic"]).json()
    )
    assert "seeds" in post(api(world.root), nodes=upload("n.csv", NODES), seeds=99).json()


def test_only_superusers_run_what_ifs(world, api) -> None:
    assert post(api(world.dean), nodes=upload("nodes.csv", NODES)).status_code == 403
    assert api(world.charlie).get("/api/v1/whatif/").status_code == 403


def test_the_whatif_page_runs_and_shows_the_curves(
    world, client, django_capture_on_commit_callbacks
) -> None:
    client.force_login(world.root)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            "/whatif/",
            {
                "nodes": upload("nodes.csv", NODES),
                "pods": upload("pods.csv", PODS),
                "policies": ["random", "bestfit"],
                "seeds": 1,
            },
        )
    assert response.status_code == 302
    page = client.get(response["Location"]).content.decode()
    assert "bestfit" in page and 'id="whatif-curve"' in page and "done" in page


def test_the_whatif_page_shows_trace_errors_on_the_form(world, client) -> None:
    client.force_login(world.root)
    page = client.post(
        "/whatif/",
        {
            "nodes": upload("nodes.csv", NODES),
            "pods": upload("pods.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,x,1,0,0\n"),
            "policies": ["random"],
            "seeds": 1,
        },
    ).content.decode()
    assert "pods.csv, line 2" in page
    assert not WhatIfRun.objects.exists()


def test_the_whatif_page_is_for_superusers(world, client) -> None:
    client.force_login(world.dean)
    assert client.get("/whatif/").status_code == 403


def test_the_whatif_page_offers_the_sample_trace_and_its_policies_differ(
    world, client, django_capture_on_commit_callbacks
) -> None:
    client.force_login(world.root)
    form = client.get("/whatif/").content.decode()
    assert re.search(r'<input type="checkbox" name="sample"[^>]* checked', form)
    assert 'href="/whatif/"' in client.get("/console/").content.decode()
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            "/whatif/", {"sample": "on", "policies": ["random", "bestfit", "fgd"], "seeds": 2}
        )
    assert response.status_code == 302, response.content.decode()
    run = WhatIfRun.objects.get()
    assert run.status == "done", run.error
    summary = run.result["summary"]
    means = {p: s["unallocated_gpu_pct"]["mean"] for p, s in summary.items()}
    assert None not in means.values()
    assert len(set(means.values())) == 3  # the policies hand out different amounts
    assert means["fgd"] < means["random"]  # the paper's ordering on this sample
    assert any(s["unallocated_gpu_pct"]["std"] > 0 for s in summary.values())
    page = client.get(response["Location"]).content.decode()
    for value in means.values():
        assert f"{value}" in page
    assert "— ±" not in page


def test_without_a_trace_or_the_sample_the_page_says_what_is_missing(world, client) -> None:
    client.force_login(world.root)
    response = client.post("/whatif/", {"policies": ["random"], "seeds": 1})
    assert response.status_code == 200
    assert "Upload a trace or use the sample." in response.content.decode()
    assert not WhatIfRun.objects.exists()
