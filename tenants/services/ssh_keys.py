"""SSH public keys on a person's account, for the portal's SSH gateway (docs/ssh.md).

A key is checked with asyncssh before it is stored: a private key, a certificate, an
authorized_keys line with options, a weak key (RSA under 2048 bits, DSA) or a key already on
some account is refused with a message that names the problem. Keys are stored in OpenSSH's
one-line format; the SHA-256 fingerprint is unique across all accounts, so a key names one
person.
"""

from __future__ import annotations

from typing import Any

import asyncssh
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from core.audit import record
from tenants.models import SshKey

MAX_KEYS_PER_PERSON = 50
MIN_RSA_BITS = 2048
MAX_KEY_CHARS = 16_384  # an 8192-bit RSA key is about 1,400 characters
SUPPORTED_ALGORITHMS = frozenset(
    {
        "ssh-ed25519",
        "ssh-rsa",
        "ecdsa-sha2-nistp256",
        "ecdsa-sha2-nistp384",
        "ecdsa-sha2-nistp521",
        "sk-ssh-ed25519@openssh.com",
        "sk-ecdsa-sha2-nistp256@openssh.com",
    }
)


def parse_public_key(text: str) -> tuple[asyncssh.SSHKey, str]:
    """The key and its OpenSSH one-line form, or ValidationError({"key": ...}) saying why not."""
    text = (text or "").strip()
    if not text:
        raise ValidationError(
            {"key": _("paste a public key, e.g. the contents of ~/.ssh/id_ed25519.pub")}
        )
    if len(text) > MAX_KEY_CHARS:
        raise ValidationError({"key": _("this is too long to be a public key")})
    if "PRIVATE KEY" in text:
        raise ValidationError(
            {
                "key": _(
                    "this is a private key: never share it. Paste the public key instead "
                    "(the .pub file, e.g. ~/.ssh/id_ed25519.pub)"
                )
            }
        )
    first = text.split(None, 1)[0]
    if "-cert-v01@openssh.com" in first:
        raise ValidationError(
            {"key": _("SSH certificates are not supported: paste the plain public key")}
        )
    if first == "ssh-dss":
        raise ValidationError(
            {"key": _("DSA keys are too weak: use an Ed25519 key (ssh-keygen -t ed25519)")}
        )
    if len(text.splitlines()) > 1 and not text.startswith("---- BEGIN SSH2 PUBLIC KEY"):
        raise ValidationError({"key": _("paste one key, on one line")})
    try:
        key = asyncssh.import_public_key(text)
    except (asyncssh.KeyImportError, ValueError, TypeError) as error:
        if first not in SUPPORTED_ALGORITHMS and not text.startswith("----"):
            raise ValidationError(
                {
                    "key": _(
                        "not a public key in OpenSSH format: it should start with ssh-ed25519, "
                        "ssh-rsa or ecdsa-sha2-…, not %(start)r"
                    )
                    % {"start": first[:40]}
                }
            ) from error
        raise ValidationError(
            {"key": _("not a valid public key: %(error)s") % {"error": str(error)}}
        ) from error
    algorithm = key.get_algorithm()
    if algorithm not in SUPPORTED_ALGORITHMS:
        raise ValidationError(
            {"key": _("keys of type %(type)s are not supported") % {"type": algorithm}}
        )
    if algorithm == "ssh-rsa":
        bits = int(getattr(key.pyca_key, "key_size", 0))
        if bits < MIN_RSA_BITS:
            raise ValidationError(
                {
                    "key": _(
                        "this RSA key has %(bits)s bits, too weak: use at least %(min)s bits, or "
                        "an Ed25519 key (ssh-keygen -t ed25519)"
                    )
                    % {"bits": bits, "min": MIN_RSA_BITS}
                }
            )
    line = key.export_public_key("openssh").decode("ascii").strip()
    return key, line


@transaction.atomic
def add_ssh_key(*, actor: Any, key: str, name: str = "") -> SshKey:
    """Add ``key`` to ``actor``'s account. Named after its comment when no name is given."""
    parsed, line = parse_public_key(key)
    fingerprint = parsed.get_fingerprint("sha256")
    name = (name or "").strip() or (parsed.get_comment() or "").strip() or parsed.get_algorithm()
    existing = SshKey.objects.filter(fingerprint=fingerprint).first()
    if existing is not None:
        if existing.user_id == actor.pk:
            raise ValidationError(
                {
                    "key": _("you have already added this key (as “%(name)s”)")
                    % {"name": existing.name}
                }
            )
        raise ValidationError(
            {"key": _("this key is already registered to another account: use a key of your own")}
        )
    if SshKey.objects.filter(user=actor).count() >= MAX_KEYS_PER_PERSON:
        raise ValidationError(
            {"key": _("you have %(n)s keys already: remove one first") % {"n": MAX_KEYS_PER_PERSON}}
        )
    try:
        with transaction.atomic():
            ssh_key = SshKey.objects.create(
                user=actor, name=name[:100], key=line, fingerprint=fingerprint
            )
    except IntegrityError as error:  # the same key added at the same moment elsewhere
        raise ValidationError({"key": _("this key is already registered")}) from error
    record("ssh_key.add", actor=actor, target=ssh_key, name=ssh_key.name, fingerprint=fingerprint)
    return ssh_key


@transaction.atomic
def remove_ssh_key(*, actor: Any, ssh_key: SshKey) -> None:
    record(
        "ssh_key.remove",
        actor=actor,
        target=ssh_key,
        name=ssh_key.name,
        fingerprint=ssh_key.fingerprint,
        owner=ssh_key.user.username,
    )
    ssh_key.delete()


def touch_ssh_key(ssh_key: SshKey) -> None:
    """The key was used to sign in to the SSH gateway now."""
    now = timezone.now()
    SshKey.objects.filter(pk=ssh_key.pk).update(last_used_at=now)
    ssh_key.last_used_at = now
