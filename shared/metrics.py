"""Prometheus metrics shared by every service.

Per-topic consumed/published/failed counts and handler latency come from FastStream's
``KafkaPrometheusMiddleware`` (installed by :func:`shared.kafka.broker.make_broker`); the metrics here are
the ones FastStream cannot know about.
"""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

registry: CollectorRegistry = REGISTRY

DEAD_LETTERS = Counter(
    "evidentia_dead_letters_total",
    "Events sent to a dead-letter topic.",
    ["service", "topic", "error_type"],
)
DEAD_LETTER_FAILURES = Counter(
    "evidentia_dead_letter_send_failures_total",
    "Attempts to send a dead letter that failed (retried: the event stays uncommitted until one succeeds).",
    ["service", "topic"],
)
HANDLER_RETRIES = Counter(
    "evidentia_handler_retries_total",
    "Attempts at an event that failed and were retried.",
    ["service", "topic", "transient"],
)
REQUEST_LATENCY = Histogram(
    "evidentia_request_reply_seconds",
    "Round trip of a Kafka request/reply call, from publish to reply.",
    ["topic", "outcome"],
    buckets=(0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
REQUEST_TIMEOUTS = Counter("evidentia_request_timeouts_total", "Request/reply calls that timed out.", ["topic"])
REQUEST_RESENDS = Counter(
    "evidentia_request_resends_total",
    "Requests published a second time after their server went silent (EVIDENTIA_KAFKA_REQUEST_RESEND_AFTER_S "
    "for searches, EVIDENTIA_KAFKA_SYNTHESIS_RESEND_AFTER_S for syntheses).",
    ["topic"],
)
REQUESTS_ABANDONED = Counter(
    "evidentia_requests_abandoned_total",
    "Requests a service stopped (and whose SQL it cancelled) because the caller's timeout ran out.",
    ["topic"],
)
BATCH_SIZE = Histogram(
    "evidentia_batch_size",
    "Events per batch taken by a batch consumer.",
    ["service", "topic"],
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024),
)
DOCUMENTS_STORED = Counter("evidentia_documents_total", "Documents processed by the parser, by outcome.", ["outcome"])
CHUNKS_STORED = Counter("evidentia_chunks_written_total", "Chunks written (text or vectors).", ["service"])
POSTINGS_CACHE_TERMS = Counter(
    "evidentia_retriever_postings_cache_terms_total",
    "Common terms a lexical search found current in the retriever's memory (hit) or read, wholly or the blocks "
    "written since (miss).",
    ["outcome"],
)
POSTINGS_CACHE_BYTES = Gauge(
    "evidentia_retriever_postings_cache_bytes", "Bytes of common terms' postings the retriever holds in memory."
)
DOC_VALUES_BYTES = Gauge(
    "evidentia_retriever_doc_values_bytes", "Bytes of chunks' filter columns (doc values) the retriever holds."
)
DOC_VALUES_PENDING = Gauge(
    "evidentia_retriever_doc_values_pending_documents",
    "Documents changed past the doc values' horizon at their last read (counted up to one over the cap a read "
    "takes in): high and steady while a long transaction holds the horizon back.",
)
DOC_VALUES_HELD_BACK = Counter(
    "evidentia_retriever_doc_values_held_back_total",
    "Doc-values reads that found more changed documents than one read takes in (a long transaction holding the "
    "horizon back, or a burst): the search checked its filters in SQL instead; `action`: `reload` (everything "
    "read again in the background) or `wait` (the horizon had not moved, or everything was read again moments "
    "ago: nothing read).",
    ["action"],
)
SEARCH_REPLICA_LAG = Gauge(
    "evidentia_retriever_search_replica_lag_seconds",
    "How far behind the primary the database the retriever searches is: 0 on the primary, or on a replica that "
    "has replayed all it received; else the age of the last transaction it replayed.",
)
EMBED_SECONDS = Histogram(
    "evidentia_embed_batch_seconds",
    "Seconds the model spent encoding one batch.",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
EMBED_PASSAGES = Counter("evidentia_embedded_passages_total", "Passages embedded.")
EMBED_RATE = Gauge("evidentia_embed_passages_per_second", "Passages per second of the last encoded batch.")
CONSUMER_LAG = Gauge(
    "evidentia_consumer_lag",
    "Records not yet consumed (high watermark - next offset) on the partitions of the last batch.",
    ["service", "topic"],
)
EMBED_DEVICE = Gauge(
    "evidentia_embedding_device_info",
    "Device the embedding model runs on, what runs it (provider: an ONNX Runtime execution provider or torch) and "
    "its precision.",
    ["model", "device", "provider", "precision"],
)
NCBI_REQUESTS = Counter(
    "evidentia_ncbi_requests_total", "E-utilities calls by utility and status.", ["utility", "status"]
)
TIME_TO_FIRST_TOKEN = Histogram(
    "evidentia_time_to_first_token_seconds",
    "From question to the first streamed token.",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30),
)
HTTP_REQUESTS = Counter("evidentia_http_requests_total", "Gateway HTTP requests.", ["route", "method", "status"])
HTTP_LATENCY = Histogram(
    "evidentia_http_request_seconds",
    "Gateway HTTP request latency.",
    ["route", "method"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
LLM_CALLS = Counter(
    "evidentia_llm_calls_total",
    "Claude (Messages API) calls, by the service that made them, the model that answered and the step.",
    ["service", "model", "step"],
)
LLM_CALL_FAILURES = Counter(
    "evidentia_llm_call_failures_total",
    "Claude calls that failed or were cut off (also counted in evidentia_llm_calls_total).",
    ["service", "model", "step"],
)
LLM_TOKENS = Counter(
    "evidentia_llm_tokens_total",
    "Tokens of Claude calls by kind: input (full rate), output, cache_read, cache_write.",
    ["service", "model", "kind"],
)
CONVERSATIONS_DELETED = Counter(
    "evidentia_conversations_deleted_total",
    "Conversations deleted by the gateway: `request` (DELETE /v1/conversations/{id}) or `retention` (the "
    "periodic job enforcing EVIDENTIA_GATEWAY_CONVERSATION_RETENTION_DAYS).",
    ["reason"],
)
CONSULTATIONS_DELETED = Counter(
    "evidentia_consultations_deleted_total",
    "Stored guideline consultations deleted by the gateway: `request` (DELETE /v1/guidelines/consult/{id}) or "
    "`retention` (the periodic job enforcing EVIDENTIA_GATEWAY_CONVERSATION_RETENTION_DAYS, which covers them).",
    ["reason"],
)
CONVERSATION_RETENTION_FAILURES = Counter(
    "evidentia_conversation_retention_failures_total",
    "Runs of the conversation retention job that failed (retried at the next interval).",
)
