"""A student deploys a model from its page and asks it for a prediction with the "try it"
form: the answer comes back through the portal's gateway (/serve/<name>/v2/…) on the session.
Needs the model servers' Python (make apps, or SERVING_PYTHON)."""

from __future__ import annotations

import io
import os
import re
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import expect

if TYPE_CHECKING:
    from tests.browser.conftest import Portal, SignIn

ROOT = Path(__file__).resolve().parents[2]
SERVING_PYTHON = Path(
    os.environ.get("SERVING_PYTHON") or ROOT / ".apps" / "serving" / "bin" / "python"
)
MODEL = """
class Model:
    def __init__(self, model_dir):
        pass
    def predict(self, rows):
        return [2 * sum(row) for row in rows.tolist()]
"""


@pytest.mark.skipif(not SERVING_PYTHON.exists(), reason="no model servers' Python (make apps)")
def test_a_student_deploys_a_model_and_tries_it(portal: Portal, sign_in: SignIn) -> None:
    portal.call("POST", "/models/", user="student1", json={"name": "Doubler"})
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as bundle:
        bundle.writestr("model.py", MODEL)
    portal.call(
        "POST", "/models/doubler/versions/", user="student1",
        data={"framework": "custom"}, files={"file": ("doubler.zip", archive.getvalue())},
    )  # fmt: skip

    page = sign_in("student1", next="/models/doubler/")
    deploy = page.locator("#deploy")
    deploy.get_by_label("Endpoint name").fill("doubler")
    deploy.get_by_label("Size").select_option(label="½ CPU, 1 GiB")
    deploy.get_by_role("button", name="Deploy").click()
    page.wait_for_url(re.compile(r"/endpoints/doubler/$"))
    try:
        for _ in range(60):
            if page.locator("#state").inner_text().startswith("Running"):
                break
            page.wait_for_timeout(1000)
            page.reload()
        expect(page.locator("#state")).to_contain_text("Running")
        page.fill(
            "#try-body",
            '{"inputs": [{"name": "x", "shape": [2, 2], "datatype": "FP64", '
            '"data": [1, 2, 3, 4]}]}',
        )
        page.get_by_role("button", name="Send").click()
        answer = page.locator("#try-answer")
        expect(answer).to_have_attribute("data-status", "200", timeout=30_000)
        expect(answer).to_contain_text(re.compile(r'"data": \[\s*6,\s*14\s*\]'))  # 2 × row sums
        # Live numbers: the request is counted.
        expect(page.locator('[data-stat="ready"]')).to_have_text("1", timeout=10_000)
        page.fill("#try-body", '{"instances": [1]}')
        page.get_by_role("button", name="Send").click()
        expect(answer).to_have_attribute("data-status", "400")
    finally:
        portal.call("POST", "/endpoints/doubler/stop/", user="student1")
