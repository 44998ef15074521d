"""Creating, deleting and sweeping topics with Kafka's admin client (connected as every client is)."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from shared.kafka.security import client_options
from shared.kafka.topics import REPLY_TOPIC_PREFIX, TopicSpec, reply_group
from shared.settings import KafkaSettings

log = logging.getLogger(__name__)


def _admin(kafka: str | KafkaSettings) -> AIOKafkaAdminClient:
    """An admin client for a bootstrap address (plaintext) or for the settings (TLS/SASL as configured)."""
    options: dict[str, Any] = {"bootstrap_servers": kafka} if isinstance(kafka, str) else client_options(kafka)
    return AIOKafkaAdminClient(client_id="evidentia-admin", **options)


async def ensure_topics(kafka: str | KafkaSettings, specs: list[TopicSpec], replication_factor: int = 1) -> list[str]:
    """Create the topics that do not exist yet; return the names created.

    ``kafka``: the settings (connects with their TLS/SASL), or a bare bootstrap address (plaintext).
    """
    admin = _admin(kafka)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [s for s in specs if s.name not in existing]
        if not missing:
            return []
        new = [NewTopic(s.name, s.partitions, replication_factor, topic_configs=s.config) for s in missing]
        with contextlib.suppress(TopicAlreadyExistsError):  # another instance won the race
            await admin.create_topics(new)
        log.info("created topics", extra={"topics": [s.name for s in missing]})
        return [s.name for s in missing]
    finally:
        await admin.close()


async def delete_topics(kafka: str | KafkaSettings, names: list[str]) -> None:
    admin = _admin(kafka)
    await admin.start()
    try:
        await admin.delete_topics(names)
    except Exception:  # best effort at shutdown: a reply topic also expires by retention
        log.warning("could not delete topics %s", names, exc_info=True)
    finally:
        await admin.close()


class ReplyTopicSweeper:
    """Deletes the reply topics of processes that died without deleting their own (a gateway killed, a pod
    evicted): a reply topic is the owner's for as long as the owner is a member of its :func:`reply_group`.

    A sweep lists the ``replies.`` topics and describes their groups; a topic whose group has no member is a
    suspect, and is deleted when it is still one at the next sweep (``every_s`` later), so a process that has
    just created its topic and not yet joined its group is never taken for dead. ``own`` (the sweeping process's
    own topic) is never touched. Any replica may sweep; two deleting the same topic is harmless.
    """

    def __init__(self, kafka: KafkaSettings, own: str):
        self.kafka = kafka
        self.own = own
        self._suspects: set[str] = set()

    async def sweep(self) -> list[str]:
        """One sweep; the reply topics deleted."""
        admin = _admin(self.kafka)
        await admin.start()
        try:
            topics = [t for t in await admin.list_topics() if t.startswith(REPLY_TOPIC_PREFIX) and t != self.own]
            ownerless: set[str] = set()
            for topic in topics:
                # One group a call: aiokafka 0.14 misreads every group after the first of a DescribeGroups
                # response (seen: the second came back with its name in protocol_type), hiding its members.
                for response in await admin.describe_consumer_groups([reply_group(topic)]):
                    for group in response.groups[:1]:
                        error_code, group_id, _state, _protocol_type, _protocol, members = group[:6]
                        if not error_code and group_id == reply_group(topic) and not members:
                            ownerless.add(topic)
            doomed = sorted(ownerless & self._suspects)
            self._suspects = ownerless - set(doomed)
            if doomed:
                await admin.delete_topics(doomed)
                log.info("deleted the reply topics of processes no longer running", extra={"topics": doomed})
            return doomed
        finally:
            await admin.close()
