"""SSH public keys on a person's account: the API and the page (the gateway that uses them:
tests/workloads/test_ssh.py). bob adds his own keys; charlie never sees or removes them."""

from __future__ import annotations

import asyncssh
import pytest
from django.test import Client

from core.models import AuditEvent
from tenants.models import SshKey

pytestmark = pytest.mark.django_db

URL = "/api/v1/ssh-keys/"


def public(algorithm: str = "ssh-ed25519", comment: str = "bob@laptop", **kw: int) -> str:
    key = asyncssh.generate_private_key(algorithm, comment=comment, **kw)
    return key.export_public_key().decode()


def test_bob_adds_a_key_sees_its_fingerprint_and_removes_it(world, api) -> None:
    line = public()
    created = api(world.bob).post(URL, {"key": line}, format="json")
    assert created.status_code == 201, created.json()
    body = created.json()
    expected = asyncssh.import_public_key(line).get_fingerprint("sha256")
    assert body["fingerprint"] == expected and body["name"] == "bob@laptop"
    assert body["key"] == line.strip()
    assert [k["id"] for k in api(world.bob).get(URL).json()["results"]] == [body["id"]]
    assert AuditEvent.objects.filter(action="ssh_key.add", actor=world.bob).exists()

    assert api(world.bob).delete(f"{URL}{body['id']}/").status_code == 204
    assert not SshKey.objects.exists()
    assert AuditEvent.objects.filter(action="ssh_key.remove", actor=world.bob).exists()


def test_charlie_can_neither_list_nor_remove_bobs_key(world, api) -> None:
    key_id = api(world.bob).post(URL, {"key": public(), "name": "laptop"}).json()["id"]
    assert api(world.charlie).get(URL).json()["results"] == []
    assert api(world.charlie).get(f"{URL}{key_id}/").status_code == 404
    assert api(world.charlie).delete(f"{URL}{key_id}/").status_code == 404
    assert SshKey.objects.filter(pk=key_id).exists()
    assert api(None).get(URL).status_code in (401, 403)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "paste a public key"),
        ("hello world", "not a public key in OpenSSH format"),
        ("ssh-ed25519 AAAAnotbase64!!", "not a valid public key"),
        ("private", "this is a private key"),
        ("rsa1024", "1024 bits, too weak"),
        ("certificate", "certificates are not supported"),
        ("ssh-dss AAAAB3NzaC1kc3MAAACBAP", "DSA keys are too weak"),
    ],
)
def test_what_is_not_a_usable_public_key_is_a_400_naming_the_problem(
    world, api, text: str, problem: str
) -> None:
    if text == "private":
        text = asyncssh.generate_private_key("ssh-ed25519").export_private_key().decode()
    elif text == "rsa1024":
        text = public("ssh-rsa", key_size=1024)
    elif text == "certificate":
        ca, user = (asyncssh.generate_private_key("ssh-ed25519") for _ in range(2))
        text = ca.generate_user_certificate(user, "bob").export_certificate().decode()
    response = api(world.bob).post(URL, {"key": text}, format="json")
    assert response.status_code == 400
    assert problem in " ".join(response.json()["key"]), response.json()
    assert not SshKey.objects.exists()


def test_a_key_is_one_persons_only(world, api) -> None:
    line = public("ssh-rsa", key_size=2048)
    assert api(world.bob).post(URL, {"key": line}).status_code == 201
    again = api(world.bob).post(URL, {"key": line})
    assert again.status_code == 400 and "already added this key" in again.json()["key"][0]
    theirs = api(world.charlie).post(URL, {"key": line})
    assert theirs.status_code == 400
    assert "already registered to another account" in theirs.json()["key"][0]
    assert SshKey.objects.count() == 1


def test_the_page_adds_a_key_shows_the_fingerprint_and_how_to_connect(world, settings) -> None:
    settings.SSH_PUBLIC_HOST = "gpu.uni.example"
    settings.SSH_GATEWAY_PORT = 2222
    client = Client()
    client.force_login(world.bob)
    line = public()
    response = client.post("/account/ssh-keys/", {"name": "laptop", "key": line}, follow=True)
    page = response.content.decode()
    key = SshKey.objects.get(user=world.bob)
    assert key.name == "laptop" and key.fingerprint in page
    assert "ssh &lt;environment&gt;@gpu.uni.example -p 2222" in page
    assert "Host quanta-&lt;environment&gt;" in page and "Port 2222" in page
    assert "/account/ssh-keys/" in client.get("/account/").content.decode()

    client.force_login(world.charlie)
    assert key.fingerprint not in client.get("/account/ssh-keys/").content.decode()
    assert client.post(f"/account/ssh-keys/{key.pk}/remove/").status_code == 404
    client.force_login(world.bob)
    client.post(f"/account/ssh-keys/{key.pk}/remove/")
    assert not SshKey.objects.exists()


def test_the_page_shows_a_bad_key_as_an_error_under_the_key_field(world) -> None:
    client = Client()
    client.force_login(world.bob)
    private = asyncssh.generate_private_key("ssh-ed25519").export_private_key().decode()
    response = client.post("/account/ssh-keys/", {"name": "oops", "key": private})
    assert response.status_code == 200
    assert "this is a private key" in " ".join(response.context["form"].errors["key"])
    assert not SshKey.objects.exists()


def test_the_page_and_its_refusals_read_in_chinese(world, api) -> None:
    world.bob.language = "zh-hans"
    world.bob.save(update_fields=["language"])
    client = Client()
    client.force_login(world.bob)
    page = client.get("/account/ssh-keys/").content.decode()
    assert "SSH 密钥" in page and "如何连接" in page
    response = client.post("/account/ssh-keys/", {"key": public("ssh-rsa", key_size=1024)})
    assert "强度太弱" in " ".join(response.context["form"].errors["key"])
