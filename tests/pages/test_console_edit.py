"""Queues, priority classes and images changed on console pages, through the services the API
uses (an audit row each); for superusers only."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from core.models import AuditEvent
from scheduling.models import Cluster, PriorityClass, Queue
from workloads import catalog as catalog_services
from workloads.models import Image

pytestmark = pytest.mark.django_db


@pytest.fixture
def lab() -> Cluster:
    return Cluster.objects.create(name="Lab", slug="lab", backend="local")


def queue_form(cluster: Cluster, **changes: object) -> dict[str, object]:
    return {
        "cluster": cluster.pk,
        "name": "research",
        "weight": 3,
        "capability": '{"gpus": 8}',
        "reclaimable": "on",
        "is_open": "on",
        **changes,
    }


def test_only_superusers_reach_the_edit_pages(world, lab, signed_in) -> None:
    queue = Queue.objects.create(cluster=lab, name="default")
    priority = PriorityClass.objects.create(name="high", value=100)
    image = Image.objects.create(name="PyTorch", slug="pytorch")
    pages = [
        "/console/queues/new/",
        f"/console/queues/{queue.pk}/",
        "/console/priority-classes/new/",
        f"/console/priority-classes/{priority.pk}/",
        "/console/catalog/images/new/",
        "/console/catalog/images/pytorch/",
    ]
    for user in (world.alice, world.bob, world.charlie, world.dean):
        client = signed_in(user)
        for url in pages:
            assert client.get(url).status_code == 403, (user, url)
            assert client.post(url, queue_form(lab, name="sneaky")).status_code == 403
        assert client.post("/console/catalog/images/pytorch/retire/").status_code == 403
    assert not Queue.objects.filter(name="sneaky").exists()
    assert Image.objects.get(slug="pytorch").is_active
    root = signed_in(world.root)
    for url in pages:
        assert root.get(url).status_code == 200, url
    assert image.pk


def test_an_admin_creates_and_edits_a_queue_on_the_page(world, lab, signed_in) -> None:
    client = signed_in(world.root)
    assert 'href="/console/queues/new/"' in client.get("/console/queues/").content.decode()
    response = client.post("/console/queues/new/", queue_form(lab, tenants=[world.class_a.pk]))
    assert response.status_code == 302 and response["Location"] == "/console/queues/"
    queue = Queue.objects.get(name="research")
    assert queue.weight == 3 and queue.capability == {"gpus": 8}
    assert list(queue.tenants.all()) == [world.class_a]
    assert AuditEvent.objects.filter(action="queue.create", actor=world.root).exists()
    page = client.get("/console/queues/").content.decode()
    assert f'href="/console/queues/{queue.pk}/"' in page
    response = client.post(
        f"/console/queues/{queue.pk}/",
        queue_form(lab, weight=5, tenants=[world.class_a.pk], is_open=""),
    )
    assert response.status_code == 302
    queue.refresh_from_db()
    assert queue.weight == 5 and not queue.is_open
    update = AuditEvent.objects.get(action="queue.update")
    assert update.data["fields"] == ["is_open", "weight"]


@pytest.mark.parametrize(
    ("changes", "field_text"),
    [
        ({"weight": 0}, "must be at least 1"),
        ({"capability": '{"tpus": 1}'}, "unknown resource"),
        ({"capability": "{not json"}, "Enter a valid JSON"),
        ({"name": "no spaces please"}, "slug"),
    ],
)
def test_bad_queue_input_is_a_form_error_not_a_500(
    world, lab, signed_in, changes, field_text
) -> None:
    response = signed_in(world.root).post("/console/queues/new/", queue_form(lab, **changes))
    assert response.status_code == 200
    assert field_text in response.content.decode()
    assert not Queue.objects.exists()


def test_a_duplicate_queue_name_in_a_cluster_is_refused(world, lab, signed_in) -> None:
    Queue.objects.create(cluster=lab, name="research")
    response = signed_in(world.root).post("/console/queues/new/", queue_form(lab))
    assert response.status_code == 200 and 'role="alert"' in response.content.decode()
    assert Queue.objects.count() == 1


def test_an_admin_creates_and_edits_a_priority_class(world, signed_in) -> None:
    client = signed_in(world.root)
    response = client.post(
        "/console/priority-classes/new/",
        {"name": "exam", "value": 1000, "preempting": "on", "description": "exam week"},
    )
    assert response.status_code == 302
    priority = PriorityClass.objects.get(name="exam")
    assert priority.value == 1000 and priority.preempting
    bad = client.post(
        f"/console/priority-classes/{priority.pk}/", {"name": "exam", "value": -(10**8)}
    )
    assert bad.status_code == 200 and "must be between" in bad.content.decode()
    client.post(f"/console/priority-classes/{priority.pk}/", {"name": "exam", "value": 900})
    priority.refresh_from_db()
    assert priority.value == 900 and not priority.preempting
    actions = set(AuditEvent.objects.values_list("action", flat=True))
    assert {"priorityclass.create", "priorityclass.update"} <= actions


def test_an_admin_adds_edits_and_retires_an_image(world, signed_in) -> None:
    client = signed_in(world.root)
    page = client.get("/console/catalog/").content.decode()
    assert 'href="/console/catalog/images/new/"' in page
    response = client.post(
        "/console/catalog/images/new/",
        {
            "name": "JAX 0.7",
            "slug": "jax",
            "framework": "JAX",
            "framework_version": "0.7",
            "tools": "jupyterlab, terminal",
            "registry_ref": "quanta/jax:0.7",
        },
    )
    assert response.status_code == 302
    image = Image.objects.get(slug="jax")
    assert image.tools == ["jupyterlab", "terminal"] and image.is_active
    edit = client.get("/console/catalog/images/jax/").content.decode()
    assert 'value="jupyterlab, terminal"' in edit
    client.post(
        "/console/catalog/images/jax/",
        {"name": "JAX 0.7.1", "slug": "jax", "tools": "jupyterlab", "framework": "JAX"},
    )
    image.refresh_from_db()
    assert image.name == "JAX 0.7.1" and image.tools == ["jupyterlab"]
    client.post("/console/catalog/images/jax/retire/")
    image.refresh_from_db()
    assert not image.is_active
    assert "Bring back" in client.get("/console/catalog/").content.decode()
    client.post("/console/catalog/images/jax/retire/", {"restore": "1"})
    image.refresh_from_db()
    assert image.is_active
    actions = list(AuditEvent.objects.filter(action__startswith="image.").values_list("action"))
    assert len(actions) == 4  # create, edit, retire, bring back


def test_a_duplicate_image_slug_is_a_form_error(world, signed_in) -> None:
    Image.objects.create(name="PyTorch", slug="pytorch")
    response = signed_in(world.root).post(
        "/console/catalog/images/new/", {"name": "Other", "slug": "pytorch"}
    )
    assert response.status_code == 200 and "already exists" in response.content.decode()


def test_a_retired_image_is_not_taken_up_by_another_template(world, catalog) -> None:
    retired = Image.objects.create(name="Old", slug="old", is_active=False)
    with pytest.raises(ValidationError, match="retired"):
        catalog_services.update_template(actor=world.root, template=catalog.jupyter, image=retired)


def test_an_admin_deletes_an_unused_queue_and_priority_class_on_their_pages(
    world, lab, signed_in
) -> None:
    queue = Queue.objects.create(cluster=lab, name="research")
    priority = PriorityClass.objects.create(name="exam", value=1000)
    client = signed_in(world.root)
    page = client.get(f"/console/queues/{queue.pk}/").content.decode()
    assert f'action="/console/queues/{queue.pk}/delete/"' in page
    assert 'data-confirm="Delete the queue research?' in page
    response = client.post(f"/console/queues/{queue.pk}/delete/")
    assert response.status_code == 302 and response["Location"] == "/console/queues/"
    assert "Queue research deleted." in client.get("/console/queues/").content.decode()
    assert not Queue.objects.exists()
    page = client.get(f"/console/priority-classes/{priority.pk}/").content.decode()
    assert 'data-confirm="Delete the priority class exam?"' in page
    response = client.post(f"/console/priority-classes/{priority.pk}/delete/")
    assert response.status_code == 302
    assert not PriorityClass.objects.exists()
    actions = set(AuditEvent.objects.filter(actor=world.root).values_list("action", flat=True))
    assert {"queue.delete", "priorityclass.delete"} <= actions


def test_a_queue_in_use_is_refused_on_the_page_with_the_reason(world, lab, signed_in) -> None:
    parent = Queue.objects.create(cluster=lab, name="research")
    Queue.objects.create(cluster=lab, name="nlp", parent=parent)
    client = signed_in(world.root)
    response = client.post(f"/console/queues/{parent.pk}/delete/", follow=True)
    assert response.redirect_chain == [(f"/console/queues/{parent.pk}/", 302)]
    assert "Queue research is the parent of nlp: move or delete those first." in (
        response.content.decode()
    )
    assert Queue.objects.count() == 2
    assert not AuditEvent.objects.filter(action="queue.delete").exists()


def test_outsiders_and_a_get_delete_nothing(world, lab, signed_in) -> None:
    queue = Queue.objects.create(cluster=lab, name="research")
    priority = PriorityClass.objects.create(name="exam", value=1000)
    urls = [
        f"/console/queues/{queue.pk}/delete/",
        f"/console/priority-classes/{priority.pk}/delete/",
    ]
    for user in (world.alice, world.bob, world.charlie, world.dean):
        client = signed_in(user)
        for url in urls:
            assert client.post(url).status_code == 403, (user, url)
            assert client.get(url).status_code == 403, (user, url)
    root = signed_in(world.root)
    for url in urls:
        assert root.get(url).status_code == 405, url
    assert root.post("/console/queues/999999/delete/").status_code == 404
    assert Queue.objects.filter(pk=queue.pk).exists()
    assert PriorityClass.objects.filter(pk=priority.pk).exists()
    assert not AuditEvent.objects.filter(action__endswith=".delete").exists()


# kind: the new page, the edit page, its title, the messages after creating and saving
KINDS = {
    "queue": (
        "/console/queues/new/",
        "/console/queues/{pk}/",
        "Queue research",
        ("Queue research created.", "Queue research saved."),
    ),
    "priority class": (
        "/console/priority-classes/new/",
        "/console/priority-classes/{pk}/",
        "Priority class exam",
        ("Priority class exam (1000) created.", "Priority class exam (1000) saved."),
    ),
    "image": (
        "/console/catalog/images/new/",
        "/console/catalog/images/jax/",
        "Image JAX",
        ("Image JAX added.", "Image JAX saved."),
    ),
}


@pytest.mark.parametrize("kind", KINDS)
def test_each_new_and_edit_page_names_the_thing_and_says_what_was_done(
    world, lab, signed_in, kind
) -> None:
    new_url, edit_url, title, (created, saved) = KINDS[kind]
    model, data = {
        "queue": (Queue, queue_form(lab)),
        "priority class": (PriorityClass, {"name": "exam", "value": 1000}),
        "image": (Image, {"name": "JAX", "slug": "jax", "framework": "JAX"}),
    }[kind]
    client = signed_in(world.root)
    assert f"New {kind}" in client.get(new_url).content.decode()
    assert created in client.post(new_url, data, follow=True).content.decode()
    edit_url = edit_url.format(pk=model.objects.get().pk)
    assert title in client.get(edit_url).content.decode()
    assert saved in client.post(edit_url, data, follow=True).content.decode()


def test_the_edit_pages_speak_the_admins_language(world, lab, signed_in) -> None:
    from django.conf import settings
    from django.utils import translation

    world.root.language = "zh-hans"
    world.root.save(update_fields=["language"])
    client = signed_in(world.root)
    try:
        assert "新建队列" in client.get("/console/queues/new/").content.decode()
        created = client.post("/console/queues/new/", queue_form(lab), follow=True)
        assert "队列 research 已创建。" in created.content.decode()
        edit = f"/console/queues/{Queue.objects.get().pk}/"
        assert "队列 research" in client.get(edit).content.decode()
        saved = client.post(edit, queue_form(lab, weight=4), follow=True)
        assert "队列 research 已保存。" in saved.content.decode()
    finally:
        translation.activate(settings.LANGUAGE_CODE)
