"""Datasets: who sees and mounts what, uploads that cannot escape their folder, and a job on
the real local backend that reads its dataset and cannot change it."""

from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied, ValidationError

from scheduling.backends import registry, sandbox
from scheduling.backends.kubernetes import manifests
from scheduling.backends.kubernetes.config import KubernetesConfig
from tests.workloads.conftest import local_catalog, wait_for
from workloads import datasets, services
from workloads.choices import State, Visibility
from workloads.models import Grant
from workloads.specs import handle_for, spec_for

pytestmark = pytest.mark.django_db

URL = "/api/v1/datasets/"


@pytest.fixture
def store(settings: Any, tmp_path: Path) -> Path:
    settings.DATA_DIR = tmp_path
    settings.DATASETS_DIR = tmp_path / "datasets"
    (tmp_path / "datasets" / "mnist").mkdir(parents=True)
    (tmp_path / "datasets" / "mnist" / "labels.txt").write_text("7 2 1\n")
    (tmp_path / "outside").mkdir()
    registry.forget()
    yield tmp_path / "datasets"
    registry.forget()


def zipped(files: dict[str, bytes]) -> io.BytesIO:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as bundle:
        for name, data in files.items():
            bundle.writestr(name, data)
    buffer.seek(0)
    return buffer


def test_an_admin_registers_a_host_folder_and_shares_it_with_the_department(
    world: Any, store: Path, make_user: Any
) -> None:
    dataset = datasets.register_folder(
        actor=world.dean,
        path="mnist",
        name="MNIST",
        visibility=Visibility.TENANT,
        tenant=world.dept,
    )
    assert (dataset.slug, dataset.files, dataset.size_bytes) == ("mnist", 1, 6)
    # The department's classes see it; someone of another department does not.
    assert list(datasets.visible_to(world.bob)) == [dataset]
    assert list(datasets.visible_to(world.charlie)) == [dataset]
    outsider = make_user("eve")
    world.add(world.other_dept, outsider, "student")
    assert not datasets.visible_to(outsider).exists()


def test_folders_outside_the_datasets_dir_are_refused(world: Any, store: Path) -> None:
    for path in ("../outside", "/etc", "mnist/../../outside"):
        with pytest.raises(ValidationError) as error:
            datasets.register_folder(actor=world.root, path=path, name="x")
        assert "inside" in str(error.value)
    (store / "link").symlink_to(store.parent / "outside")
    with pytest.raises(ValidationError):
        datasets.register_folder(actor=world.root, path="link", name="x")
    with pytest.raises(PermissionDenied):
        datasets.register_folder(actor=world.bob, path="mnist", name="mine")


def test_a_private_upload_is_seen_and_mounted_by_its_owner_only(
    world: Any, store: Path, api: Any
) -> None:
    archive = zipped({"train/a.csv": b"x,y\n1,2\n", "README": b"toy"})
    archive.name = "toy.zip"
    response = api(world.bob).post(URL, {"name": "Toy", "file": archive}, format="multipart")
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["slug"], body["visibility"], body["files"]) == ("toy", "private", 2)
    assert api(world.bob).get(URL + "toy/").status_code == 200
    assert api(world.charlie).get(URL + "toy/").status_code == 404
    assert api(world.alice).get(URL).json()["results"] == []  # a teacher sees no private upload
    with pytest.raises(ValidationError) as error:
        datasets.for_launch(world.charlie, ["toy"])
    assert "no dataset toy that you may use" in str(error.value)
    assert api(None).get(URL).status_code in (401, 403)


@pytest.mark.parametrize(
    "build",
    [
        lambda: ("evil.zip", zipped({"../../escape.txt": b"x"})),
        lambda: ("evil.tar", _tar_with_link()),
        lambda: ("notes.txt", io.BytesIO(b"plain text")),
        lambda: ("broken.zip", io.BytesIO(b"PK\x03\x04 not really")),
    ],
)
def test_archives_that_escape_or_are_not_archives_are_refused_and_nothing_is_kept(
    world: Any, store: Path, build: Any
) -> None:
    filename, archive = build()
    with pytest.raises(ValidationError):
        datasets.upload_archive(actor=world.bob, archive=archive, filename=filename, name="x")
    assert not list((store / "uploads").iterdir())
    assert not (store.parent / "escape.txt").exists()
    assert not datasets.visible_to(world.root).exists()


def _tar_with_link() -> io.BytesIO:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as bundle:
        link = tarfile.TarInfo("passwd")
        link.type = tarfile.SYMTYPE
        link.linkname = "/etc/passwd"
        bundle.addfile(link)
    buffer.seek(0)
    return buffer


def test_an_upload_over_the_size_limit_is_refused(world: Any, store: Path, settings: Any) -> None:
    settings.DATASET_UPLOAD_MAX_MB = 1
    archive = zipped({"big.bin": b"\0" * (2 * 1024 * 1024)})
    with pytest.raises(ValidationError) as error:
        datasets.upload_archive(actor=world.bob, archive=archive, filename="b.zip", name="big")
    assert "more than 1 MiB" in str(error.value)


def test_sharing_needs_a_role_on_the_tenant_and_public_needs_an_admin(
    world: Any, store: Path, api: Any
) -> None:
    archive = zipped({"a": b"1"})
    with pytest.raises(ValidationError) as error:
        datasets.upload_archive(
            actor=world.bob,
            archive=archive,
            filename="a.zip",
            name="a",
            visibility=Visibility.TENANT,
            tenant=world.class_a,
        )
    assert "you do not teach or manage ML-101" in str(error.value)
    archive.seek(0)
    response = api(world.charlie).post(
        URL, {"name": "p", "visibility": "public", "file": archive}, format="multipart"
    )
    assert response.status_code == 400
    assert "only an admin" in response.content.decode()
    archive.seek(0)
    shared = datasets.upload_archive(
        actor=world.alice,
        archive=archive,
        filename="a.zip",
        name="Lab data",
        visibility=Visibility.TENANT,
        tenant=world.class_a,
    )
    assert list(datasets.visible_to(world.bob)) == [shared]
    assert not datasets.visible_to(world.charlie).exists()  # the other class
    # Only the owner changes it.
    response = api(world.bob).patch(URL + "lab-data/", {"name": "mine"}, format="json")
    assert response.status_code == 403


def test_a_job_reads_its_dataset_read_only_on_the_local_backend(
    world: Any, store: Path, run: Any
) -> None:
    problem = sandbox.bwrap_problem()
    if problem:
        pytest.skip(f"no sandbox on this host (run make apps): {problem}")
    datasets.register_folder(
        actor=world.root, path="mnist", name="MNIST", visibility=Visibility.PUBLIC
    )
    cluster, template, flavor = local_catalog(world, "jupyter")
    grant = Grant.objects.get(template=template)
    job = run(
        services.submit_job,
        actor=world.bob,
        tenant=grant.tenant,
        flavor=flavor,
        command=[
            "sh",
            "-c",
            'cat "$DATASET_MNIST/labels.txt"; '
            "if touch /datasets/mnist/new 2>/dev/null; then echo WROTE; else echo READ-ONLY; fi",
        ],
        datasets=["mnist"],
    )
    assert [d.slug for d in job.datasets.all()] == ["mnist"]
    job = wait_for(cluster, job, State.SUCCEEDED, 60)
    log = registry.get_backend(cluster).logs(handle_for(job)).text
    assert "7 2 1" in log
    assert "READ-ONLY" in log and "WROTE" not in log
    assert not (store / "mnist" / "new").exists()


def test_on_kubernetes_a_dataset_is_a_read_only_claim_and_one_without_a_claim_is_refused(
    world: Any, store: Path, run: Any
) -> None:
    dataset = datasets.register_folder(
        actor=world.root, path="mnist", name="MNIST", visibility=Visibility.PUBLIC
    )
    _cluster, template, flavor = local_catalog(world, "jupyter")
    grant = Grant.objects.get(template=template)
    job = services.submit_job(
        actor=world.bob, tenant=grant.tenant, flavor=flavor, command="python train.py",
        datasets=["mnist"],
    )  # fmt: skip
    job.image.registry_ref = "quanta/python:3.12"
    job.image.save()
    config = KubernetesConfig()
    with pytest.raises(manifests.ManifestError) as error:
        manifests.workload_objects(spec_for(job), config)
    assert "has no claim" in str(error.value)
    datasets.update(actor=world.root, dataset=dataset, claim="datasets", sub_path="mnist")
    objects = manifests.workload_objects(spec_for(job), config)
    text = str(objects[0])
    assert "'claimName': 'datasets', 'readOnly': True" in text
    assert "'mountPath': '/datasets/mnist', 'readOnly': True, 'subPath': 'mnist'" in text


def test_the_pages_list_upload_and_show_a_dataset_to_those_who_may_see_it(
    world: Any, store: Path, client: Any
) -> None:
    client.force_login(world.bob)
    archive = zipped({"a.txt": b"hello"})
    archive.name = "notes.zip"
    response = client.post(
        "/datasets/", {"name": "Notes", "visibility": "private", "file": archive}, follow=True
    )
    assert response.redirect_chain[-1][0] == "/datasets/notes/"
    page = response.content.decode()
    assert "/datasets/notes" in page and "5\xa0bytes" in page
    assert 'data-dataset="notes"' in client.get("/datasets/").content.decode()
    # A form error stays on the form, under its field, and nothing is made.
    response = client.post("/datasets/", {"name": "Empty", "visibility": "private"})
    assert response.status_code == 200
    assert "Choose an archive to upload." in response.content.decode()
    assert not datasets.visible_to(world.root).filter(slug="empty").exists()
    client.force_login(world.charlie)
    assert client.get("/datasets/notes/").status_code == 404
    assert 'data-dataset="notes"' not in client.get("/datasets/").content.decode()
    assert client.post("/datasets/notes/delete/").status_code == 404
    client.force_login(world.bob)
    client.post("/datasets/notes/delete/")
    assert not datasets.visible_to(world.root).exists()


def test_the_app_center_launches_with_the_chosen_dataset(
    world: Any, store: Path, client: Any, django_capture_on_commit_callbacks: Any
) -> None:
    datasets.register_folder(
        actor=world.root, path="mnist", name="MNIST", visibility=Visibility.PUBLIC
    )
    _cluster, template, flavor = local_catalog(world, "jupyter")
    client.force_login(world.bob)
    page = client.get("/apps/").content.decode()
    assert 'value="mnist"' in page
    response = client.post(
        f"/apps/{template.slug}/launch/", {"flavor": flavor.pk, "datasets": ["mnist"]}
    )
    assert response.status_code == 302
    workload = world.bob.workloads.get()
    assert [d.slug for d in workload.datasets.all()] == ["mnist"]
    # A dataset one may not use is not offered, and asking for it launches nothing.
    response = client.post(
        f"/apps/{template.slug}/launch/", {"flavor": flavor.pk, "datasets": ["secret"]}
    )
    assert world.bob.workloads.count() == 1
