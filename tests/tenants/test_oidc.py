"""Campus sign-in: the real OpenID Connect authorization-code flow, end to end.

The test runs a small OpenID provider on 127.0.0.1 (a ThreadingHTTPServer on a free port) with
an authorize endpoint, a token endpoint, a userinfo endpoint and a JWKS endpoint. The test plays
the browser: Quanta's /oidc/authenticate/ sends it to the provider, the provider sends it back to
/oidc/callback/ with a code, and Quanta's callback view then talks to the provider over HTTP
(code → tokens, id_token signature against the JWKS, nonce, userinfo) before signing the person in.
Nothing leaves the loopback interface.
"""

from __future__ import annotations

import base64
import json
import secrets
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import jwt
import pytest
import requests
from cryptography.hazmat.primitives.asymmetric import rsa
from django.contrib.auth import get_user_model
from django.test import Client

User = get_user_model()

CLIENT_ID = "quanta-test"
CLIENT_SECRET = "test-only-client-secret"
KEY_ID = "campus-2024"

ADA = {
    "sub": "f3b1c0de-0001",
    "preferred_username": "Ada.Lovelace",
    "email": "ada.lovelace@campus.example",
    "name": "Ada Lovelace",
    "student_id": "2024001",
}


def _new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


class CampusProvider:
    """A minimal OpenID provider: enough of the code flow to be a real counterpart."""

    def __init__(self) -> None:
        self.key = _new_key()
        self.foreign_key = _new_key()  # a key the provider does not publish
        self._lock = threading.Lock()
        self.reset()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self.server.daemon_threads = True
        host, port = self.server.server_address[:2]
        self.url = f"http://{host}:{port}"
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def reset(self) -> None:
        with self._lock:
            self.person: dict[str, Any] = dict(ADA)  # who signs in at the provider next
            self.signing_key = self.key
            self.audience = CLIENT_ID
            self.lifetime = 300
            self.codes: dict[str, dict[str, Any]] = {}
            self.access_tokens: dict[str, dict[str, Any]] = {}
            self.token_calls = 0
            self.userinfo_calls = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)

    # --- endpoints ----------------------------------------------------------------------------

    def authorize(self, query: dict[str, str]) -> tuple[int, dict[str, str], Any]:
        if (
            query.get("response_type") != "code"
            or query.get("client_id") != CLIENT_ID
            or "openid" not in query.get("scope", "").split()
            or not query.get("redirect_uri")
            or not query.get("state")
        ):
            return 400, {}, {"error": "invalid_request"}
        code = secrets.token_urlsafe(16)
        with self._lock:
            self.codes[code] = {
                "redirect_uri": query["redirect_uri"],
                "nonce": query.get("nonce"),
                "claims": dict(self.person),
            }
        back = urlencode({"code": code, "state": query["state"]})
        return 302, {"Location": f"{query['redirect_uri']}?{back}"}, None

    def token(self, form: dict[str, str], authorization: str) -> tuple[int, dict[str, str], Any]:
        with self._lock:
            self.token_calls += 1
        client_id, client_secret = form.get("client_id"), form.get("client_secret")
        if authorization.startswith("Basic "):
            decoded = base64.b64decode(authorization[6:]).decode()
            client_id, _, client_secret = decoded.partition(":")
        if client_id != CLIENT_ID or client_secret != CLIENT_SECRET:
            return 401, {}, {"error": "invalid_client"}
        if form.get("grant_type") != "authorization_code":
            return 400, {}, {"error": "unsupported_grant_type"}
        with self._lock:
            grant = self.codes.pop(form.get("code", ""), None)  # a code is good for one use
        if grant is None or grant["redirect_uri"] != form.get("redirect_uri"):
            return 400, {}, {"error": "invalid_grant"}
        claims = grant["claims"]
        now = int(time.time())
        id_token = jwt.encode(
            {
                "iss": self.url,
                "sub": claims.get("sub", ""),
                "aud": self.audience,
                "iat": now,
                "exp": now + self.lifetime,
                "nonce": grant["nonce"],
            },
            self.signing_key,
            algorithm="RS256",
            headers={"kid": KEY_ID},
        )
        access_token = secrets.token_urlsafe(24)
        with self._lock:
            self.access_tokens[access_token] = claims
        body = {
            "access_token": access_token,
            "token_type": "Bearer",
            "expires_in": 300,
            "id_token": id_token,
        }
        return 200, {"Cache-Control": "no-store"}, body

    def userinfo(self, authorization: str) -> tuple[int, dict[str, str], Any]:
        with self._lock:
            self.userinfo_calls += 1
            scheme, _, access_token = authorization.partition(" ")
            claims = self.access_tokens.get(access_token) if scheme == "Bearer" else None
        if claims is None:
            return 401, {"WWW-Authenticate": 'Bearer error="invalid_token"'}, {}
        return 200, {}, claims

    def jwks(self) -> tuple[int, dict[str, str], Any]:
        jwk = jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key(), as_dict=True)
        return 200, {}, {"keys": [jwk | {"kid": KEY_ID, "alg": "RS256", "use": "sig"}]}

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(parts.query).items()}
                if parts.path == "/authorize":
                    self._answer(*provider.authorize(query))
                elif parts.path == "/userinfo":
                    self._answer(*provider.userinfo(self.headers.get("Authorization", "")))
                elif parts.path == "/jwks":
                    self._answer(*provider.jwks())
                else:
                    self._answer(404, {}, {"error": "not_found"})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
                if urlsplit(self.path).path == "/token":
                    self._answer(*provider.token(form, self.headers.get("Authorization", "")))
                else:
                    self._answer(404, {}, {"error": "not_found"})

            def _answer(self, status: int, headers: dict[str, str], body: Any) -> None:
                data = b"" if body is None else json.dumps(body).encode()
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                if body is not None:
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


@pytest.fixture(scope="module")
def provider() -> Iterator[CampusProvider]:
    op = CampusProvider()
    op.start()
    yield op
    op.stop()


@pytest.fixture
def campus(
    provider: CampusProvider, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> CampusProvider:
    """Quanta configured for campus sign-in against the loopback provider."""
    for name in ("http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    provider.reset()
    settings.OIDC_ENABLED = True
    settings.OIDC_RP_CLIENT_ID = CLIENT_ID
    settings.OIDC_RP_CLIENT_SECRET = CLIENT_SECRET
    settings.OIDC_RP_SIGN_ALGO = "RS256"
    settings.OIDC_RP_SCOPES = "openid email profile"
    settings.OIDC_OP_AUTHORIZATION_ENDPOINT = f"{provider.url}/authorize"
    settings.OIDC_OP_TOKEN_ENDPOINT = f"{provider.url}/token"
    settings.OIDC_OP_USER_ENDPOINT = f"{provider.url}/userinfo"
    settings.OIDC_OP_JWKS_ENDPOINT = f"{provider.url}/jwks"
    settings.OIDC_USERNAME_CLAIM = "preferred_username"
    settings.OIDC_STUDENT_NUMBER_CLAIM = "student_id"
    settings.OIDC_TIMEOUT = 5
    settings.AUTHENTICATION_BACKENDS = [
        "tenants.auth.CampusOIDCBackend",
        *(b for b in settings.AUTHENTICATION_BACKENDS if b != "tenants.auth.CampusOIDCBackend"),
    ]
    return provider


def start_sign_in(client: Client, provider: CampusProvider, next_url: str = "") -> str:
    """Click the campus button, sign in at the provider; return where it sends the browser."""
    start = client.get("/oidc/authenticate/", {"next": next_url} if next_url else {})
    assert start.status_code == 302
    authorize_url = start["Location"]
    assert authorize_url.startswith(f"{provider.url}/authorize?")
    at_provider = requests.get(authorize_url, allow_redirects=False, timeout=5)
    assert at_provider.status_code == 302, at_provider.text
    return at_provider.headers["Location"]


def come_back(client: Client, callback_url: str, **replace: str) -> Any:
    """Follow the provider's redirect to Quanta's callback, optionally altering the query."""
    parts = urlsplit(callback_url)
    assert (parts.netloc, parts.path) == ("testserver", "/oidc/callback/")
    query = {k: v[0] for k, v in parse_qs(parts.query).items()} | replace
    return client.get(urlunsplit(("", "", parts.path, urlencode(query), "")))


def sign_in(client: Client, provider: CampusProvider) -> Any:
    return come_back(client, start_sign_in(client, provider))


def who_am_i(client: Client) -> Any:
    return client.get("/api/v1/users/me/")


@pytest.mark.django_db
def test_the_campus_button_sends_the_browser_to_the_provider_with_state_and_nonce(
    client: Client, campus: CampusProvider
) -> None:
    start = client.get("/oidc/authenticate/")

    url = urlsplit(start["Location"])
    params = parse_qs(url.query)
    assert f"{url.scheme}://{url.netloc}{url.path}" == f"{campus.url}/authorize"
    assert params["response_type"] == ["code"]
    assert params["client_id"] == [CLIENT_ID]
    assert params["redirect_uri"] == ["http://testserver/oidc/callback/"]
    assert params["scope"] == ["openid email profile"]
    assert len(params["state"][0]) >= 32
    assert len(params["nonce"][0]) >= 32


@pytest.mark.django_db
def test_a_first_campus_sign_in_creates_the_account_and_signs_the_person_in(
    client: Client, campus: CampusProvider
) -> None:
    response = sign_in(client, campus)

    assert response.status_code == 302
    assert response["Location"] == "/"
    me = who_am_i(client)
    assert me.status_code == 200
    assert me.json()["username"] == "ada.lovelace"
    user = User.objects.get(username="ada.lovelace")
    assert user.email == "ada.lovelace@campus.example"
    assert user.display_name == "Ada Lovelace"
    assert user.student_number == "2024001"
    assert not user.has_usable_password()
    assert campus.token_calls == 1
    assert campus.userinfo_calls == 1


@pytest.mark.django_db
def test_signing_in_again_reuses_the_account_and_picks_up_a_changed_email(
    client: Client, campus: CampusProvider
) -> None:
    sign_in(client, campus)
    first = User.objects.get(username="ada.lovelace")
    client.logout()

    campus.person |= {"preferred_username": "ADA.LOVELACE", "email": "ada@cs.campus.example"}
    response = sign_in(client, campus)

    assert response.status_code == 302
    assert who_am_i(client).json()["id"] == first.pk
    assert User.objects.filter(username__iexact="ada.lovelace").count() == 1
    first.refresh_from_db()
    assert first.email == "ada@cs.campus.example"
    assert first.display_name == "Ada Lovelace"


@pytest.mark.django_db
def test_a_student_imported_from_a_roster_lands_in_that_account_when_matched_by_student_number(
    client: Client, campus: CampusProvider, settings: Any
) -> None:
    # The roster import names accounts after the (lower-cased) student number.
    imported = User.objects.create_user(
        username="2024001", email="ada.lovelace@campus.example", student_number="2024001"
    )
    settings.OIDC_USERNAME_CLAIM = "student_id"

    sign_in(client, campus)

    assert who_am_i(client).json()["id"] == imported.pk
    assert User.objects.count() == 1


@pytest.mark.django_db
def test_a_deactivated_account_cannot_sign_in_through_the_campus(
    client: Client, campus: CampusProvider
) -> None:
    User.objects.create_user(username="ada.lovelace", is_active=False)

    response = sign_in(client, campus)

    assert response.status_code == 302
    assert who_am_i(client).status_code == 401
    assert User.objects.count() == 1


@pytest.mark.django_db
def test_signing_in_from_a_deep_link_returns_the_person_to_that_page(
    client: Client, campus: CampusProvider
) -> None:
    login_page = client.get("/account/tokens/", follow=True)
    assert login_page.redirect_chain == [("/login/?next=/account/tokens/", 302)]

    response = come_back(client, start_sign_in(client, campus, next_url="/account/tokens/"))

    assert response.status_code == 302
    assert response["Location"] == "/account/tokens/"
    assert client.get("/account/tokens/").status_code == 200


@pytest.mark.django_db
def test_an_id_token_signed_by_a_key_the_provider_does_not_publish_is_refused(
    client: Client, campus: CampusProvider, caplog: pytest.LogCaptureFixture
) -> None:
    campus.signing_key = campus.foreign_key  # same kid, wrong key

    response = sign_in(client, campus)

    assert response.status_code == 400
    assert "JWS token verification failed" in caplog.text
    assert campus.token_calls == 1
    assert campus.userinfo_calls == 0  # refused before any claim was trusted
    assert who_am_i(client).status_code == 401
    assert not User.objects.filter(username="ada.lovelace").exists()


@pytest.mark.django_db
def test_an_id_token_carrying_another_nonce_is_refused(
    client: Client, campus: CampusProvider, caplog: pytest.LogCaptureFixture
) -> None:
    callback_url = start_sign_in(client, campus)
    code = parse_qs(urlsplit(callback_url).query)["code"][0]
    campus.codes[code]["nonce"] = "a-nonce-from-another-sign-in"

    response = come_back(client, callback_url)

    assert response.status_code == 400
    assert "Nonce verification failed" in caplog.text
    assert campus.userinfo_calls == 0
    assert who_am_i(client).status_code == 401
    assert not User.objects.exists()


@pytest.mark.django_db
def test_a_callback_with_a_tampered_state_is_refused(
    client: Client, campus: CampusProvider, caplog: pytest.LogCaptureFixture
) -> None:
    callback_url = start_sign_in(client, campus)

    response = come_back(client, callback_url, state="forged-" + secrets.token_urlsafe(16))

    assert response.status_code == 400
    assert "state not found in session" in caplog.text
    assert campus.token_calls == 0  # the code was never redeemed
    assert who_am_i(client).status_code == 401
    assert not User.objects.exists()


@pytest.mark.django_db
def test_a_callback_in_a_browser_that_never_started_sign_in_is_refused(
    client: Client, campus: CampusProvider
) -> None:
    callback_url = start_sign_in(Client(), campus)  # someone else's sign-in

    response = come_back(client, callback_url)

    assert response.status_code == 302
    assert campus.token_calls == 0
    assert who_am_i(client).status_code == 401
    assert not User.objects.exists()


@pytest.mark.django_db
def test_claims_without_a_username_are_refused(
    client: Client, campus: CampusProvider, caplog: pytest.LogCaptureFixture
) -> None:
    del campus.person["preferred_username"]

    response = sign_in(client, campus)

    assert response.status_code == 302
    assert response["Location"] == "/login/"  # LOGIN_REDIRECT_URL_FAILURE
    assert "Claims verification failed" in caplog.text
    assert campus.userinfo_calls == 1
    assert "_auth_user_id" not in client.session
    assert who_am_i(client).status_code == 401
    assert not User.objects.exists()


@pytest.mark.django_db
def test_the_login_page_offers_campus_sign_in_only_when_oidc_is_enabled(
    client: Client, settings: Any
) -> None:
    settings.OIDC_PROVIDER_NAME = "Sign in with Campus ID"

    settings.OIDC_ENABLED = False
    without = client.get("/login/").content.decode()
    settings.OIDC_ENABLED = True
    with_oidc = client.get("/login/?next=/account/tokens/").content.decode()

    assert "/oidc/authenticate/" not in without
    assert "Sign in with Campus ID" not in without
    assert 'href="/oidc/authenticate/?next=/account/tokens/"' in with_oidc
    assert "Sign in with Campus ID" in with_oidc
    assert 'name="password"' in with_oidc  # local accounts still work


@pytest.mark.django_db
def test_an_id_token_issued_for_another_client_is_refused(
    client: Client, campus: CampusProvider, caplog: pytest.LogCaptureFixture
) -> None:
    campus.audience = "some-other-app"

    response = sign_in(client, campus)

    assert response.status_code == 400
    assert "issued for another client" in caplog.text
    assert who_am_i(client).status_code == 401
    assert not User.objects.exists()


@pytest.mark.django_db
def test_an_expired_id_token_is_refused(
    client: Client, campus: CampusProvider, caplog: pytest.LogCaptureFixture
) -> None:
    campus.lifetime = -3600

    response = sign_in(client, campus)

    assert response.status_code == 400
    assert "expired" in caplog.text
    assert not User.objects.exists()


@pytest.mark.django_db
def test_a_claim_cannot_take_over_a_local_account(
    client: Client, campus: CampusProvider, caplog: pytest.LogCaptureFixture
) -> None:
    User.objects.create_user(username="admin", password="local-secret", is_superuser=True)
    campus.person["preferred_username"] = "admin"

    response = sign_in(client, campus)

    assert response.status_code == 302 and response["Location"] == "/login/"
    assert "it is a local account" in caplog.text
    assert who_am_i(client).status_code == 401


@pytest.mark.django_db
def test_an_identity_provider_that_refuses_the_client_gives_a_failed_sign_in_not_an_error(
    client: Client, campus: CampusProvider, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    settings.OIDC_RP_CLIENT_SECRET = "a-rotated-secret"

    response = sign_in(client, campus)

    assert response.status_code == 302 and response["Location"] == "/login/"
    assert "identity provider answered" in caplog.text
    assert who_am_i(client).status_code == 401


@pytest.mark.django_db
def test_the_role_claim_maps_to_a_membership_of_the_campus_role_tenant(
    client: Client, campus: CampusProvider, settings: Any, world: Any
) -> None:
    from tenants.models import Membership

    settings.OIDC_ROLE_CLAIM = "affiliation"
    settings.CAMPUS_TEACHER_VALUES = ["faculty"]
    settings.CAMPUS_ROLE_TENANT = "CS"  # a slug in any letter case
    campus.person = dict(ADA) | {"affiliation": ["member", "Faculty"]}

    assert sign_in(client, campus).status_code == 302

    membership = Membership.objects.get(user__username="ada.lovelace")
    assert (membership.tenant, membership.role) == (world.dept, "teacher")
