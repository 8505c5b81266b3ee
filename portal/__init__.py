"""The Quanta project package: settings, URLs, ASGI and Celery apps, audit log, health."""

from portal.celery import app as celery_app

__all__ = ["celery_app"]
