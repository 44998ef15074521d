"""Evidentia's topics: their names, partitions and retention, and the names derived from a topic.

Creating and deleting topics is :mod:`shared.kafka.topic_admin`'s; the Strimzi manifests under deploy/ declare
the same topics and are checked against :func:`standard_topics`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
