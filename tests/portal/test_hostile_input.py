"""Bad input is refused at the edge with the API's error format, never a 500, and nothing is
written: one test per hole found from outside (docs/api.md, "Errors" and "Limits")."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from core.limits import MAX_BODY_BYTES, MAX_QUERY_STRING_BYTES
from core.models import AuditEvent
from tenants.models import Membership, Quota, Tenant
from workloads.constants import MAX_ENV_BYTES, MAX_ENV_VARIABLES
from workloads.models import Flavor, Image, Workload

pytestmark = pytest.mark.django_db


def _json(client: Any, method: str, url: str, body: Any) -> Any:
    raw = body if isinstance(body, str | bytes) else json.dumps(body)
    return getattr(client, method)(url, raw, content_type="application/json")


def _job(class_a: Any, **changes: Any) -> dict[str, Any]:
    return {"tenant": "ml-101", "flavor": "small", "command": ["python", "x.py"], **changes}


# --- NUL characters and lone surrogates -------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/tenants/ml%00101/",
        "/api/v1/flavors/sm%00all/",
        "/api/v1/tenants/?within=c%00s",
        "/api/v1/memberships/?user=b%00ob",
        "/api/v1/workloads/?tenant__slug=%00",
    ],
)
def test_it_refuses_a_nul_in_a_path_or_a_query_parameter(class_a: Any, api: Any, url: str) -> None:
    response = api(class_a.world.bob).get(url)
    assert response.status_code == 400
    assert "NUL" in response.json()["detail"]


def test_it_refuses_a_nul_in_a_json_slug_and_names_the_field(class_a: Any, api: Any) -> None:
    w = class_a.world
    body = {"user": "charlie\u0000", "tenant": "ml-101", "role": "student"}
    response = _json(api(w.alice), "post", "/api/v1/memberships/", body)
    assert response.status_code == 400
    assert "NUL" in response.json()["user"][0]
    assert not Membership.objects.filter(user=w.charlie, tenant=w.class_a).exists()


def test_it_refuses_a_lone_surrogate_in_the_command(class_a: Any, api: Any) -> None:
    raw = '{"tenant": "ml-101", "flavor": "small", "command": ["python", "\\ud800"]}'
    before = Workload.objects.count()
    response = _json(api(class_a.world.bob), "post", "/api/v1/workloads/jobs/", raw)
    assert response.status_code == 400
    assert "surrogate" in response.json()["command"][0]
    assert Workload.objects.count() == before


def test_it_refuses_a_nul_in_a_form_post_of_a_page(world: Any) -> None:
    response = Client().post("/login/", {"username": "bob\x00", "password": "x"})
    assert response.status_code == 400


def test_it_refuses_a_nul_in_a_roster_field_naming_line_and_column(class_a: Any, api: Any) -> None:
    csv = "student_number,name,email,class\ns1,Ann\x00Smith,ann@uni.example,ml-101\n"
    response = api(class_a.world.alice).post(
        "/api/v1/roster-import/",
        {"file": SimpleUploadedFile("r.csv", csv.encode())},
        format="multipart",
    )
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert errors == [{"line": 2, "column": "name", "message": "contains a NUL character"}]


# --- Sizes and shapes -------------------------------------------------------------------------


def test_it_refuses_deeply_nested_json_without_recursing(class_a: Any, api: Any) -> None:
    raw = "[" * 100_000 + "]" * 100_000
    response = _json(api(class_a.world.bob), "post", "/api/v1/workloads/jobs/", raw)
    assert response.status_code == 400
    assert "nested deeper" in response.json()["detail"]


def test_it_still_reads_brackets_inside_strings(class_a: Any, api: Any) -> None:
    body = _job(class_a, command=["echo", "[" * 1000])
    response = _json(api(class_a.world.bob), "post", "/api/v1/workloads/jobs/", body)
    assert response.status_code == 201, response.json()


def test_it_refuses_a_roster_field_over_the_csv_limit(class_a: Any, api: Any) -> None:
    csv = "student_number,name,email,class\ns1," + "A" * 140_000 + ",a@uni.example,ml-101\n"
    response = api(class_a.world.alice).post(
        "/api/v1/roster-import/",
        {"file": SimpleUploadedFile("r.csv", csv.encode())},
        format="multipart",
    )
    assert response.status_code == 400
    assert "line 2" in response.json()["file"][0]


def test_it_refuses_a_long_roster_cell_as_a_row_error(class_a: Any, api: Any) -> None:
    csv = "student_number,name,email,class\ns1," + "A" * 5000 + ",a@uni.example,ml-101\n"
    response = api(class_a.world.alice).post(
        "/api/v1/roster-import/",
        {"file": SimpleUploadedFile("r.csv", csv.encode())},
        format="multipart",
    )
    assert response.status_code == 400
    assert response.json()["errors"][0]["column"] == "name"


@pytest.mark.parametrize("command", [7, True, 1.5, {"a": 1}, None, ["python", 1], [["a"]], []])
def test_a_command_is_a_string_or_a_list_of_strings(class_a: Any, api: Any, command: Any) -> None:
    before = Workload.objects.count()
    body = _job(class_a, command=command)
    response = _json(api(class_a.world.bob), "post", "/api/v1/workloads/jobs/", body)
    assert response.status_code == 400, response.json()
    assert "command" in response.json()
    assert Workload.objects.count() == before


def test_a_command_as_one_string_still_works(class_a: Any, api: Any) -> None:
    """A string is a shell command line, run as typed (loops, pipes and quotes included)."""
    body = _job(class_a, command="python train.py --epochs 3")
    response = _json(api(class_a.world.bob), "post", "/api/v1/workloads/jobs/", body)
    assert response.status_code == 201
    assert response.json()["command"] == ["/bin/sh", "-c", "python train.py --epochs 3"]


def test_it_refuses_too_many_env_variables(class_a: Any, api: Any) -> None:
    env = {f"V{i}": "x" for i in range(MAX_ENV_VARIABLES + 1)}
    response = _json(
        api(class_a.world.bob), "post", "/api/v1/workloads/jobs/", _job(class_a, env=env)
    )
    assert response.status_code == 400
    assert "env" in response.json()


def test_it_refuses_env_variables_over_their_total_size(class_a: Any, api: Any) -> None:
    env = {f"V{i}": "x" * 4000 for i in range(MAX_ENV_BYTES // 4000 + 1)}
    response = _json(
        api(class_a.world.bob), "post", "/api/v1/workloads/jobs/", _job(class_a, env=env)
    )
    assert response.status_code == 400
    assert "bytes" in response.json()["env"][0]


def test_the_job_page_bounds_env_variables_too(class_a: Any) -> None:
    client = Client()
    client.force_login(class_a.world.bob)
    env = "\n".join(f"V{i}=x" for i in range(MAX_ENV_VARIABLES + 1))
    before = Workload.objects.count()
    client.post(
        "/workloads/new-job/",
        {
            "tenant": class_a.world.class_a.pk,
            "flavor": class_a.catalog.small.pk,
            "command": "python x.py",
            "workers": 1,
            "max_retries": 0,
            "env": env,
        },
    )
    assert Workload.objects.count() == before


def test_a_body_over_the_limit_is_413_in_json(class_a: Any, api: Any) -> None:
    raw = json.dumps(_job(class_a, name="x" * (MAX_BODY_BYTES + 10)))
    response = _json(api(class_a.world.bob), "post", "/api/v1/workloads/jobs/", raw)
    assert response.status_code == 413
    assert response["Content-Type"] == "application/json"
    assert "larger than" in response.json()["detail"]


def test_a_long_query_string_is_414_in_json(class_a: Any, api: Any) -> None:
    response = api(class_a.world.bob).get("/api/v1/tenants/?q=" + "a" * 60_000)
    assert response.status_code == 414
    assert str(MAX_QUERY_STRING_BYTES) in response.json()["detail"]


def test_a_json_parse_error_uses_the_error_format(class_a: Any, api: Any) -> None:
    response = _json(api(class_a.world.bob), "post", "/api/v1/workloads/jobs/", "{nope")
    assert response.status_code == 400
    assert response.json()["detail"].startswith("JSON parse error")


def test_an_unknown_api_url_is_a_json_404(world: Any, api: Any) -> None:
    response = api(world.bob).get("/api/v1/no-such-thing/")
    assert response.status_code == 404
    assert response.json() == {"detail": "Not found."}


# --- The catalog --------------------------------------------------------------------------------


def test_a_flavor_with_more_gpus_than_the_maximum_is_refused(class_a: Any, api: Any) -> None:
    root = api(class_a.world.root)
    body = {"name": "big", "slug": "big", "cpu_milli": 1000, "memory_mib": 1024, "gpus": 1024}
    response = _json(root, "post", "/api/v1/flavors/", body)
    assert response.status_code == 400
    assert "gpus" in response.json()
    assert not Flavor.objects.filter(slug="big").exists()
    assert root.get("/api/v1/flavors/").status_code == 200


@pytest.mark.parametrize(
    ("url", "body"),
    [
        ("/api/v1/images/", {"name": "I", "slug": "i", "tools": "null"}),
        (
            "/api/v1/templates/",
            {
                "name": "T",
                "slug": "t",
                "kind": "jupyter",
                "image": "pytorch",
                "default_flavor": "small",
                "allowed_flavors": "small",
                "environment": "null",
            },
        ),
    ],
)
def test_null_json_columns_are_refused_from_forms_and_json(
    class_a: Any, api: Any, url: str, body: dict[str, Any]
) -> None:
    root = api(class_a.world.root)
    as_json = {k: (None if v == "null" else v) for k, v in body.items()}
    as_json["allowed_flavors"] = ["small"]
    assert _json(root, "post", url, as_json).status_code == 400
    # A form's "null" is a string: a typed field reads it as a list or an object, never None.
    response = root.post(url, body)
    assert response.status_code == 201
    assert None not in (response.json().get("tools", []), response.json().get("environment", {}))


def test_a_new_tenant_may_be_created_inactive(world: Any, api: Any) -> None:
    body = {"kind": "class", "name": "Old", "slug": "old", "parent": "cs", "is_active": False}
    response = _json(api(world.dean), "post", "/api/v1/tenants/", body)
    assert response.status_code == 201, response.json()
    assert Tenant.objects.get(slug="old").is_active is False


# --- Deleting what is in use: 409 with a reason, nothing written ---------------------------------


@pytest.mark.parametrize(
    ("url", "model", "uses"),
    [
        ("/api/v1/tenants/ml-101/", Tenant, "workload"),
        ("/api/v1/clusters/lab/", None, "workload"),
        ("/api/v1/flavors/small/", Flavor, "template"),
        ("/api/v1/images/pytorch/", Image, "template"),
    ],
)
def test_deleting_something_in_use_is_409_naming_what_uses_it(
    class_a: Any, api: Any, url: str, model: Any, uses: str
) -> None:
    Workload.objects.filter(pk=class_a.job.pk).update(state="succeeded")
    events = AuditEvent.objects.count()
    response = api(class_a.world.root).delete(url)
    assert response.status_code == 409, response.content
    body = response.json()
    assert uses in body["detail"]
    assert "cannot be deleted" in body["detail"]
    assert body["used_by"]
    assert AuditEvent.objects.count() == events  # the delete's audit row was rolled back
    if model is not None:
        assert model.objects.filter(slug=url.rstrip("/").rsplit("/", 1)[1]).exists()


# --- Logs ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("offset", ["99999999999999", "-1", "x", str(2**70)])
def test_a_log_offset_out_of_bounds_is_400(class_a: Any, api: Any, offset: str) -> None:
    url = f"/api/v1/workloads/{class_a.job.pk}/logs/?offset={offset}"
    response = api(class_a.world.bob).get(url)
    assert response.status_code == 400
    assert "offset" in response.json()


def test_a_log_read_within_bounds_still_works(class_a: Any, api: Any) -> None:
    response = api(class_a.world.bob).get(f"/api/v1/workloads/{class_a.job.pk}/logs/?offset=4")
    assert response.status_code == 200
    assert response.json()["text"] == "of task 0\n"


def test_the_outsider_gets_404_for_the_logs_whatever_the_offset(class_a: Any, api: Any) -> None:
    url = f"/api/v1/workloads/{class_a.job.pk}/logs/?offset=99999999999999"
    assert api(class_a.world.charlie).get(url).status_code == 404


# --- Quotas are set from above -------------------------------------------------------------------


def test_a_department_admin_cannot_raise_their_own_department_quota(world: Any, api: Any) -> None:
    response = _json(api(world.dean), "patch", "/api/v1/tenants/cs/quota/", {"gpus": "7.0"})
    assert response.status_code == 403
    assert Quota.objects.get(tenant=world.dept).gpus is None


def test_a_department_admin_sets_the_quota_of_its_classes(world: Any, api: Any) -> None:
    response = _json(api(world.dean), "patch", "/api/v1/tenants/ml-101/quota/", {"gpus": "3.0"})
    assert response.status_code == 200
    assert response.json()["gpus"] == "3.000"


def test_only_a_superuser_sets_the_school_quota(world: Any, api: Any, make_user: Any) -> None:
    from tenants.choices import Role

    rector = make_user("rector")
    world.add(world.school, rector, Role.ADMIN)
    url = "/api/v1/tenants/uni/quota/"
    assert _json(api(rector), "patch", url, {"gpus": "99"}).status_code == 403
    assert (
        _json(api(rector), "patch", "/api/v1/tenants/cs/quota/", {"gpus": "9"}).status_code == 200
    )
    assert _json(api(world.root), "patch", url, {"gpus": "99"}).status_code == 200


def test_the_console_quota_page_applies_the_same_rule(world: Any) -> None:
    client = Client()
    client.force_login(world.dean)
    assert client.get("/console/tenants/cs/quota/").status_code == 403
    assert client.post("/console/tenants/cs/quota/", {"gpus": "7"}).status_code == 403
    assert Quota.objects.get(tenant=world.dept).gpus is None
    assert client.get("/console/tenants/ml-101/quota/").status_code == 200


def test_the_quota_service_refuses_a_tenant_admin_on_its_own_tenant(world: Any) -> None:
    from django.core.exceptions import PermissionDenied

    from tenants import services

    with pytest.raises(PermissionDenied):
        services.set_quota(actor=world.dean, tenant=world.dept, gpus=7)


def test_the_outsider_cannot_read_or_change_class_a_quota(world: Any, api: Any) -> None:
    charlie = api(world.charlie)
    assert charlie.get("/api/v1/tenants/ml-101/quota/").status_code == 404
    assert (
        _json(charlie, "patch", "/api/v1/tenants/ml-101/quota/", {"gpus": "9"}).status_code == 404
    )


# --- Scopes --------------------------------------------------------------------------------------


def test_a_superuser_lists_every_membership(world: Any, api: Any) -> None:
    response = api(world.root).get("/api/v1/memberships/")
    users = {m["user"] for m in response.json()["results"]}
    assert users == {"alice", "bob", "charlie", "dean"}


def test_the_outsider_lists_only_their_own_membership(world: Any, api: Any) -> None:
    response = api(world.charlie).get("/api/v1/memberships/")
    assert [m["user"] for m in response.json()["results"]] == ["charlie"]


@pytest.mark.parametrize("url", ["/api/v1/memberships/", "/api/v1/grants/", "/api/v1/tenants/"])
def test_browsable_forms_list_no_other_tenant_or_user(class_a: Any, url: str) -> None:
    client = Client()
    client.force_login(class_a.world.charlie)
    response = client.get(url, HTTP_ACCEPT="text/html")
    assert response.status_code == 200
    page = response.content.decode()
    assert "<form" in page
    for secret in ("alice", "bob", "ml-101", "ML-101", "tara", "tom"):
        assert secret not in page, secret
