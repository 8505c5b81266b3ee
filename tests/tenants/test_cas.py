"""Campus sign-in through CAS (统一身份认证), end to end against a small CAS server.

The test runs a CAS server on 127.0.0.1 (a ThreadingHTTPServer on a free port) with
``/login`` (issues a one-time service ticket and redirects back to the service),
``/p3/serviceValidate`` (CAS 3 XML with attributes; checks the ticket and the service) and
``/logout``. The test plays the browser; Quanta's django-cas-ng login view validates the
ticket over HTTP."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit
from xml.sax.saxutils import escape

import pytest
import requests
from django.contrib.auth import get_user_model
from django.test import Client

from tenants.models import Membership
from tests.tenants.campus import signed_in_as

pytestmark = pytest.mark.django_db
User = get_user_model()

ADA = {
    "user": "2024001",
    "attributes": {
        "displayName": "Ada Lovelace",
        "mail": "ada@campus.example",
        "studentNumber": "2024001",
        "affiliation": ["member", "student"],
    },
}


class CASServer:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        host, port = self.server.server_address[:2]
        self.url = f"http://{host}:{port}/cas/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def reset(self) -> None:
        with self.lock:
            self.person: dict[str, Any] = dict(ADA)
            self.tickets: dict[str, tuple[str, dict[str, Any]]] = {}
            self.logouts: list[str] = []
            self.validations = 0
            self.validation_paths: list[str] = []

    def login(self, query: dict[str, str]) -> tuple[int, dict[str, str], str]:
        service = query.get("service", "")
        if not service:
            return 400, {}, "no service"
        ticket = f"ST-{secrets.token_hex(8)}"
        with self.lock:
            self.tickets[ticket] = (service, self.person)
        sep = "&" if "?" in service else "?"
        return 302, {"Location": f"{service}{sep}{urlencode({'ticket': ticket})}"}, ""

    def validate(self, query: dict[str, str]) -> tuple[int, dict[str, str], str]:
        with self.lock:
            self.validations += 1
            issued = self.tickets.pop(query.get("ticket", ""), None)  # one use only
        if issued is None or issued[0] != query.get("service"):
            code = "INVALID_TICKET" if issued is None else "INVALID_SERVICE"
            body = (
                '<cas:serviceResponse xmlns:cas="http://www.yale.edu/tp/cas">'
                f'<cas:authenticationFailure code="{code}">ticket refused'
                "</cas:authenticationFailure></cas:serviceResponse>"
            )
            return 200, {}, body
        person = issued[1]
        attributes = "".join(
            f"<cas:{name}>{escape(v)}</cas:{name}>"
            for name, value in person["attributes"].items()
            for v in (value if isinstance(value, list) else [value])
        )
        body = (
            '<cas:serviceResponse xmlns:cas="http://www.yale.edu/tp/cas">'
            f"<cas:authenticationSuccess><cas:user>{escape(person['user'])}</cas:user>"
            f"<cas:attributes>{attributes}</cas:attributes>"
            "</cas:authenticationSuccess></cas:serviceResponse>"
        )
        return 200, {}, body

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        cas = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(parts.query).items()}
                if parts.path == "/cas/login":
                    self._answer(*cas.login(query))
                elif parts.path in ("/cas/p3/serviceValidate", "/cas/serviceValidate"):
                    with cas.lock:
                        cas.validation_paths.append(parts.path)
                    self._answer(*cas.validate(query))
                elif parts.path == "/cas/logout":
                    with cas.lock:
                        cas.logouts.append(query.get("service", ""))
                    self._answer(200, {}, "signed out")
                else:
                    self._answer(404, {}, "not found")

            def _answer(self, status: int, headers: dict[str, str], body: str) -> None:
                data = body.encode()
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "text/xml; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


@pytest.fixture(scope="module")
def cas_server() -> Iterator[CASServer]:
    server = CASServer()
    server.thread.start()
    yield server
    server.server.shutdown()


@pytest.fixture
def campus_cas(
    cas_server: CASServer, settings: Any, world: Any, monkeypatch: pytest.MonkeyPatch
) -> CASServer:
    for name in ("http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    cas_server.reset()
    settings.CAS_ENABLED = True
    settings.CAS_SERVER_URL = cas_server.url
    settings.CAS_VERSION = "3"
    settings.CAS_USERNAME_ATTRIBUTE = "cas:user"
    settings.CAS_NAME_ATTRIBUTE = "displayName"
    settings.CAS_EMAIL_ATTRIBUTE = "mail"
    settings.CAS_STUDENT_NUMBER_ATTRIBUTE = "studentNumber"
    settings.CAS_ROLE_ATTRIBUTE = "affiliation"
    settings.CAS_TIMEOUT = 3
    settings.CAMPUS_TEACHER_VALUES = ["faculty", "teacher"]
    settings.CAMPUS_ROLE_TENANT = world.dept.slug
    settings.AUTHENTICATION_BACKENDS = [
        *settings.AUTHENTICATION_BACKENDS,
        "tenants.auth.CampusCASBackend",
    ]
    return cas_server


def sign_in_at_cas(client: Client, cas: CASServer) -> str:
    """Click the CAS button and sign in at the CAS server; return Quanta's service URL."""
    start = client.get("/cas/login/")
    assert start.status_code == 302
    assert start["Location"].startswith(f"{cas.url}login?service=")
    at_cas = requests.get(start["Location"], allow_redirects=False, timeout=5)
    assert at_cas.status_code == 302, at_cas.text
    back = urlsplit(at_cas.headers["Location"])
    assert (back.netloc, back.path) == ("testserver", "/cas/login/")
    return f"{back.path}?{back.query}"


def test_the_sign_in_page_shows_the_cas_button_only_when_cas_is_on(
    client: Client, campus_cas: CASServer, settings: Any
) -> None:
    assert 'href="/cas/login/"' in client.get("/login/").content.decode()
    settings.CAS_ENABLED = False
    assert 'href="/cas/login/"' not in client.get("/login/").content.decode()


def test_a_good_ticket_signs_in_and_maps_the_attributes(
    client: Client, campus_cas: CASServer
) -> None:
    response = client.get(sign_in_at_cas(client, campus_cas))

    assert response.status_code == 302
    assert signed_in_as(client) == "2024001"
    ada = User.objects.get(username="2024001")
    assert (ada.display_name, ada.email, ada.student_number) == (
        "Ada Lovelace",
        "ada@campus.example",
        "2024001",
    )
    assert not ada.has_usable_password()
    assert Membership.objects.get(user=ada).role == "student"
    assert campus_cas.validation_paths == ["/cas/p3/serviceValidate"]


def test_a_teacher_affiliation_maps_to_the_teacher_role(
    client: Client, campus_cas: CASServer
) -> None:
    campus_cas.person = {
        "user": "T.Turing",
        "attributes": {"displayName": "Alan Turing", "affiliation": ["faculty"]},
    }
    client.get(sign_in_at_cas(client, campus_cas))

    turing = User.objects.get(username="t.turing")
    membership = Membership.objects.get(user=turing)
    assert (membership.tenant.slug, membership.role) == ("cs", "teacher")


def test_a_bad_ticket_returns_to_the_sign_in_page_with_a_message(
    client: Client, campus_cas: CASServer
) -> None:
    response = client.get("/cas/login/", {"ticket": "ST-forged"}, follow=True)

    assert response.status_code == 200
    assert response.redirect_chain[-1][0] == "/login/"
    assert "refused the ticket" in response.content.decode()
    assert signed_in_as(client) is None
    assert campus_cas.validations == 1


def test_a_ticket_is_good_only_once(client: Client, campus_cas: CASServer) -> None:
    service_url = sign_in_at_cas(client, campus_cas)
    Client().get(service_url)  # someone else used it first

    client.get(service_url)

    assert signed_in_as(client) is None


def test_a_cas_server_that_is_down_gives_a_message(
    client: Client, campus_cas: CASServer, settings: Any
) -> None:
    from tests.tenants.directory import _free_port

    settings.CAS_SERVER_URL = f"http://127.0.0.1:{_free_port()}/cas/"

    response = client.get("/cas/login/", {"ticket": "ST-1"}, follow=True)

    assert response.status_code == 200
    assert "cannot be reached" in response.content.decode()


def test_cas_does_not_take_over_a_local_account(client: Client, campus_cas: CASServer) -> None:
    campus_cas.person = {"user": "alice", "attributes": {"mail": "impostor@campus.example"}}

    response = client.get(sign_in_at_cas(client, campus_cas), follow=True)

    assert "local account" in response.content.decode()
    assert signed_in_as(client) is None
    assert User.objects.get(username="alice").email == "alice@uni.example"


def test_sign_out_ends_the_session_and_signs_out_at_the_cas_server(
    client: Client, campus_cas: CASServer
) -> None:
    client.get(sign_in_at_cas(client, campus_cas))
    home = client.get("/").content.decode()
    assert 'action="/cas/logout/"' in home  # the Sign out button

    response = client.post("/cas/logout/")

    assert response.status_code == 302
    assert response["Location"].startswith(f"{campus_cas.url}logout?service=")
    assert signed_in_as(client) is None
    assert requests.get(response["Location"], timeout=5).status_code == 200
    assert campus_cas.logouts == ["http://testserver/"]


def test_a_local_sign_out_button_stays_for_local_accounts(
    client: Client, campus_cas: CASServer
) -> None:
    client.post("/login/", {"username": "bob", "password": "pw-bob"})

    assert 'action="/logout/"' in client.get("/").content.decode()


def _sign_in_with_next(client: Client, cas: CASServer, next_url: str) -> Any:
    start = client.get("/cas/login/", {"next": next_url})
    at_cas = requests.get(start["Location"], allow_redirects=False, timeout=5)
    back = urlsplit(at_cas.headers["Location"])
    return client.get(f"{back.path}?{back.query}")


def test_next_is_followed_after_sign_in(client: Client, campus_cas: CASServer) -> None:
    response = _sign_in_with_next(client, campus_cas, "/account/")

    assert response.status_code == 302
    assert response["Location"] == "/account/"
    assert signed_in_as(client) == "2024001"


def test_next_never_leads_off_the_site(client: Client, campus_cas: CASServer) -> None:
    response = _sign_in_with_next(client, campus_cas, "https://evil.example/")

    assert response.status_code == 302
    assert response["Location"] == "/"
    assert signed_in_as(client) == "2024001"


def test_the_cas_servers_single_sign_out_ends_the_quanta_session(
    client: Client, campus_cas: CASServer
) -> None:
    service_url = sign_in_at_cas(client, campus_cas)
    ticket = parse_qs(urlsplit(service_url).query)["ticket"][0]
    client.get(service_url)
    assert signed_in_as(client) == "2024001"

    # The CAS server, not the browser, posts the logout request to the service URL.
    logout_request = (
        '<samlp:LogoutRequest xmlns:samlp="urn:oasis:names:tc:SAML:2.0:protocol" '
        'xmlns:saml="urn:oasis:names:tc:SAML:2.0:assertion" ID="LR-1" Version="2.0" '
        'IssueInstant="2026-12-01T20:00:00Z"><saml:NameID>@NOT_USED@</saml:NameID>'
        f"<samlp:SessionIndex>{ticket}</samlp:SessionIndex></samlp:LogoutRequest>"
    )
    answer = Client().post("/cas/login/", {"logoutRequest": logout_request})

    assert answer.status_code == 302
    assert signed_in_as(client) is None


def test_cas_protocol_2_validates_at_serviceValidate(
    client: Client, campus_cas: CASServer, settings: Any
) -> None:
    settings.CAS_VERSION = "2"

    client.get(sign_in_at_cas(client, campus_cas))

    assert signed_in_as(client) == "2024001"
    assert User.objects.get(username="2024001").display_name == "Ada Lovelace"
    assert campus_cas.validation_paths == ["/cas/serviceValidate"]
