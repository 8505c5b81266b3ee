from celery import Task, shared_task

from tenants import services

SIGN_IN_MAIL_RETRIES = 3


@shared_task(name="quanta.tenants.close_ended_terms", acks_late=True)
def close_ended_terms() -> list[str]:
    """Deactivate classes whose term has ended (beat: hourly)."""
    return [tenant.slug for tenant in services.close_ended_terms(actor=None)]


@shared_task(
    bind=True,
    name="quanta.tenants.send_sign_in_links",
    acks_late=True,
    max_retries=SIGN_IN_MAIL_RETRIES,
)
def send_sign_in_links(self: Task, recipients: list[list[int]], base_url: str) -> int:
    """Mail the one-time links issued by ``services.issue_sign_in_links``: ``recipients`` are
    [user id, tenant id] pairs (``services.link_recipients``), each link made as it is sent.
    A mail server that is down is tried again later (after 30 s, 60 s, 120 s); in-process
    (no worker) its error reaches the page that asked, which tells the teacher to download
    the links instead. A redelivery mails a second link that works as well as the first."""
    pairs = [(user_id, tenant_id) for user_id, tenant_id in recipients]
    try:
        return services.send_sign_in_links(recipients=pairs, base_url=base_url)
    except OSError as exc:  # smtplib's errors are OSErrors
        if self.request.is_eager:
            raise
        raise self.retry(exc=exc, countdown=30 * 2**self.request.retries) from exc
