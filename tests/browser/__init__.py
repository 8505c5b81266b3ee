"""Browser tests: Playwright drives Chromium against a real `manage.py serve` (see conftest)."""
