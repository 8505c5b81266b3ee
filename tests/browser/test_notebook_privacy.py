"""A running notebook is its owner's: anyone else finds nothing at its address."""

from __future__ import annotations

from typing import TYPE_CHECKING

from playwright.sync_api import expect

if TYPE_CHECKING:
    from tests.browser.conftest import Portal, SignIn


def test_a_student_of_another_class_gets_404_for_someone_elses_notebook(
    portal: Portal, sign_in: SignIn
) -> None:
    pk = portal.launch("student6", "jupyter-pytorch", "cpu-small")  # ML-101
    notebook = portal.wait_for(pk, "Running")["open_url"]
    assert notebook == f"/nb/{pk}/lab"
    try:
        owner = sign_in("student6", next="/workloads/")
        assert owner.request.get(notebook).status == 200

        outsider = sign_in("student23")  # SP-210
        response = outsider.goto(notebook)
        assert response is not None
        assert response.status == 404
        expect(outsider.locator("h1")).to_have_text("Not found")
        expect(outsider.locator("body")).to_contain_text("not yours to open")
        assert outsider.request.get(f"/nb/{pk}/api/contents").status == 404
        assert outsider.goto(f"/workloads/{pk}/").status == 404  # type: ignore[union-attr]
    finally:
        portal.stop(pk)
        portal.wait_for(pk, "Stopped", timeout=30)
