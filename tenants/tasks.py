from celery import shared_task

from tenants import services


@shared_task(name="quanta.tenants.close_ended_terms", acks_late=True)
def close_ended_terms() -> list[str]:
    """Deactivate classes whose term has ended (beat: hourly)."""
    return [tenant.slug for tenant in services.close_ended_terms(actor=None)]
