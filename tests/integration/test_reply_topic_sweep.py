"""Issue #40 item 14: the reply topic of a killed gateway is removed; a live owner's is kept.

A gateway reads its reply topic as the only member of a consumer group of its own (shared.kafka.topics.reply_group);
another gateway's sweep deletes a reply topic whose group has had no member at two sweeps in a row.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient

from shared.kafka.topic_admin import ensure_topics
from shared.kafka.topics import TopicSpec, reply_group, reply_topic
from tests.integration.conftest import Infra
from tests.integration.gateways import infra_gateway, infra_gateway_process

pytestmark = [pytest.mark.integration]


async def _topics(bootstrap: str) -> set[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return set(await admin.list_topics())
    finally:
        await admin.close()


async def _live_owner(bootstrap: str, topic: str, joined: threading.Event, stop: threading.Event) -> None:
    """Another process's reply consumer, a member of its topic's group until ``stop`` is set."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=reply_group(topic))
    await consumer.start()
    try:
        while not stop.is_set():
            await consumer.getmany(timeout_ms=200)
            if consumer.assignment():
                joined.set()
    finally:
        await consumer.stop()


def test_a_killed_gateways_reply_topic_is_swept_and_a_live_ones_kept(infra: Infra) -> None:
    bootstrap = infra.kafka.bootstrap
    run = uuid.uuid4().hex[:8]
    dead = reply_topic(f"gateway-dead-{run}")
    with infra_gateway_process(infra, f"doomed-{run}", {"EVIDENTIA_INSTANCE_ID": f"dead-{run}"}) as (_, doomed):
        assert dead in asyncio.run(_topics(bootstrap))
        doomed.kill()  # SIGKILL: no chance to delete its own topic
    assert dead in asyncio.run(_topics(bootstrap))

    live = reply_topic(f"gateway-live-{run}")
    asyncio.run(ensure_topics(bootstrap, [TopicSpec(live, 1)]))
    joined, stop = threading.Event(), threading.Event()
    owner = threading.Thread(target=lambda: asyncio.run(_live_owner(bootstrap, live, joined, stop)), daemon=True)
    owner.start()  # its own thread and loop: the gateway started below blocks this one
    try:
        assert joined.wait(60), "the live owner never joined its group"
        env = {"EVIDENTIA_INSTANCE_ID": f"sweeper-{run}", "EVIDENTIA_GATEWAY_REPLY_TOPIC_SWEEP_EVERY_S": "2"}
        with infra_gateway(infra, f"sweeper-{run}", env):
            deadline = time.monotonic() + 120
            while dead in asyncio.run(_topics(bootstrap)) and time.monotonic() < deadline:
                time.sleep(1)
            time.sleep(5)  # a few more sweeps: the live owner's topic must survive them
            topics = asyncio.run(_topics(bootstrap))
        assert owner.is_alive(), "the live owner stopped on its own"
    finally:
        stop.set()
        owner.join(30)
    assert dead not in topics, "the killed gateway's reply topic is still there"
    assert live in topics, "a live owner's reply topic was deleted"
