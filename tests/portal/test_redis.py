"""With REDIS_URL set, the channel layer and the Celery broker really go through Redis."""

import uuid

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from portal.celery import app
from tests.marks import requires_redis


@requires_redis
def test_a_group_message_travels_through_the_redis_channel_layer() -> None:
    layer = get_channel_layer()
    assert type(layer).__module__.startswith("channels_redis")
    group = f"test-{uuid.uuid4().hex}"

    async def round_trip() -> dict:
        channel = await layer.new_channel()
        await layer.group_add(group, channel)
        await layer.group_send(group, {"type": "workload.state", "state": "Running"})
        message = await layer.receive(channel)
        await layer.group_discard(group, channel)
        return message

    assert async_to_sync(round_trip)() == {"type": "workload.state", "state": "Running"}


@requires_redis
@pytest.mark.celery_worker
def test_celery_sends_tasks_to_redis_not_in_process(settings) -> None:
    assert app.conf.task_always_eager is False
    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1)
        assert conn.transport_cls in ("redis", "rediss")


def test_without_redis_tasks_run_in_process(settings) -> None:
    if settings.REDIS_URL:
        pytest.skip("REDIS_URL is set: this checks the embedded default")
    assert app.conf.task_always_eager is True
