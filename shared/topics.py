"""Topic names, and creating them with the right partitions and retention."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from shared.kafka_security import client_options
from shared.settings import KafkaSettings

INGEST_REQUESTS = "ingest.requests"
BOOKSHELF_PACKAGES = "bookshelf.packages"
PMIDS_DISCOVERED = "pmids.discovered"
DOCUMENTS_FETCHED = "documents.fetched"
CHUNKS_CREATED = "chunks.created"
CHUNKS_EMBEDDED = "chunks.embedded"
CHUNKS_REINDEX = "chunks.reindex"
RETRIEVAL_REQUESTS = "retrieval.requests"
SYNTHESIS_REQUESTS = "synthesis.requests"
LLM_STEP_REQUESTS = "llm.steps.requests"
NCBI_REQUESTS = "ncbi.requests"

PIPELINE_TOPICS = (
    INGEST_REQUESTS,
    BOOKSHELF_PACKAGES,
    PMIDS_DISCOVERED,
    DOCUMENTS_FETCHED,
    CHUNKS_CREATED,
    CHUNKS_EMBEDDED,
    CHUNKS_REINDEX,
)
REQUEST_TOPICS = (RETRIEVAL_REQUESTS, SYNTHESIS_REQUESTS, LLM_STEP_REQUESTS, NCBI_REQUESTS)
REPLY_TOPIC_PREFIX = "replies."
PIPELINE_RETENTION_MS = 7 * 24 * 3600 * 1000
"""How long the pipeline topics keep their events (a week)."""
DEAD_LETTER_RETENTION_MS = 30 * 24 * 3600 * 1000
"""How long the dead-letter topics keep their letters (a month: someone has to look at them)."""
REFERRED_CONTENT_KEPT_MS = PIPELINE_RETENTION_MS + DEAD_LETTER_RETENTION_MS
"""How long content an event refers to (the claim check's ``raw_documents``) is kept after it was last used: an
event waits at most a pipeline retention before it is read, and the dead letter it may become is kept a dead-letter
retention from then, so a replay finds what its letter refers to."""

log = logging.getLogger(__name__)


def dlq(topic: str) -> str:
    """The dead-letter topic of ``topic``."""
    return f"{topic}.dlq"


def reply_topic(instance_id: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in instance_id)
    return f"{REPLY_TOPIC_PREFIX}{safe}"


def reply_group(topic: str) -> str:
    """The consumer group in which the owner of the reply topic ``topic`` reads it, alone: the group's membership
    is how others see that the owner is alive (a killed process drops out after its session timeout)."""
    return f"evidentia-{topic}"


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    config: dict[str, str] = field(default_factory=dict)


def standard_topics(partitions: int) -> list[TopicSpec]:
    """Every topic Evidentia uses except per-instance reply topics."""
    week = str(PIPELINE_RETENTION_MS)
    specs = [TopicSpec(t, partitions, {"retention.ms": week}) for t in PIPELINE_TOPICS]
    specs += [TopicSpec(t, partitions, {"retention.ms": str(3600 * 1000)}) for t in REQUEST_TOPICS]
    month = str(DEAD_LETTER_RETENTION_MS)
    specs += [TopicSpec(dlq(t), 1, {"retention.ms": month}) for t in PIPELINE_TOPICS + REQUEST_TOPICS]
    return specs


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
