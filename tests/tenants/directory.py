"""A real OpenLDAP ``slapd`` for the LDAP sign-in tests: Debian's slapd, started as a
plain process on a free loopback port with its own slapd.conf and mdb database in a
temporary folder (no root, no system configuration touched), loaded with ``slapadd``."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

SLAPD = shutil.which("slapd") or "/usr/sbin/slapd"
SLAPADD = shutil.which("slapadd") or "/usr/sbin/slapadd"
SCHEMA = Path("/etc/ldap/schema")
MODULES = Path("/usr/lib/ldap")

BASE = "dc=campus,dc=example"
PEOPLE = f"ou=people,{BASE}"
SEARCH_DN = f"cn=quanta,{BASE}"
SEARCH_PASSWORD = "search-secret"


def missing() -> str | None:
    """Why this machine cannot run the directory, or None."""
    for path in (Path(SLAPD), Path(SLAPADD), SCHEMA / "inetorgperson.schema"):
        if not path.exists():
            return (
                f"needs Debian's slapd ({path} is absent): "
                "apt-get install slapd ldap-utils (scripts/install-apps.sh does)"
            )
    return None


def person(uid: str, name: str, password: str, **extra: str) -> str:
    given, _, family = name.partition(" ")
    lines = [
        f"dn: uid={uid},{PEOPLE}",
        "objectClass: inetOrgPerson",
        f"uid: {uid}",
        f"cn: {name}",
        f"sn: {family or given}",
        f"userPassword: {password}",
    ]
    lines += [f"{key}: {value}" for key, value in extra.items()]
    return "\n".join(lines) + "\n"


PEOPLE_LDIF = "\n".join(
    [
        person(
            "2024001",
            "Ada Lovelace",
            "ada-campus-pw",
            mail="ada@campus.example",
            employeeNumber="2024001",
            employeeType="student",
        ),
        person(
            "t.turing",
            "Alan Turing",
            "turing-campus-pw",
            mail="turing@campus.example",
            employeeNumber="T0042",
            employeeType="faculty",
        ),
        # Same name as a local account of the tests' world: must not take it over.
        person("alice", "Alice Impostor", "impostor-pw", mail="impostor@campus.example"),
    ]
)


class Directory:
    def __init__(self, folder: Path, anonymous_search: bool = False) -> None:
        self.folder = folder
        self.anonymous_search = anonymous_search
        self.port = _free_port()
        self.url = f"ldap://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        (self.folder / "db").mkdir(parents=True)
        conf = self.folder / "slapd.conf"
        conf.write_text(
            "\n".join(
                [
                    *(
                        f"include {SCHEMA / name}.schema"
                        for name in ("core", "cosine", "inetorgperson", "nis")
                    ),
                    f"pidfile {self.folder / 'slapd.pid'}",
                    f"modulepath {MODULES}",
                    "moduleload back_mdb",
                    "database mdb",
                    f'suffix "{BASE}"',
                    f'rootdn "cn=admin,{BASE}"',
                    "rootpw admin-secret",
                    f"directory {self.folder / 'db'}",
                    "maxsize 16777216",
                    "access to attrs=userPassword by self write by anonymous auth by * none",
                    f'access to * by dn.exact="{SEARCH_DN}" read by self read '
                    + ("by anonymous read " if self.anonymous_search else "")
                    + "by * none",
                    "",
                ]
            )
        )
        ldif = "\n".join(
            [
                f"dn: {BASE}\nobjectClass: dcObject\nobjectClass: organization\n"
                "o: Campus\ndc: campus\n",
                f"dn: {PEOPLE}\nobjectClass: organizationalUnit\nou: people\n",
                f"dn: {SEARCH_DN}\nobjectClass: person\ncn: quanta\nsn: quanta\n"
                f"userPassword: {SEARCH_PASSWORD}\n",
                PEOPLE_LDIF,
            ]
        )
        (self.folder / "data.ldif").write_text(ldif)
        subprocess.run(
            [SLAPADD, "-f", str(conf), "-l", str(self.folder / "data.ldif")],
            check=True,
            capture_output=True,
        )
        log = (self.folder / "slapd.log").open("wb")
        # -d 0: stay in the foreground (a child we can stop), with no debug output.
        self.process = subprocess.Popen(
            [SLAPD, "-f", str(conf), "-h", f"{self.url}/", "-d", "0"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"slapd exited: {(self.folder / 'slapd.log').read_text()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("slapd did not start listening within 20 s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
