"""Every event that crosses a Kafka topic, as versioned pydantic models.

Rules (checked by ``tests/unit/test_event_contracts.py`` against ``docs/schemas/``):
- every event carries ``schema_version`` (a ``Literal``) and a ``trace_id`` that follows one piece of
  work through every service and every log line;
- an incompatible change (a field removed, renamed, retyped, or made required) bumps ``schema_version``;
  adding an optional field does not;
- consumers ignore fields they do not know, so producers may be upgraded first.

Events are keyed by ``document_id`` on the pipeline topics, so one document's events stay ordered.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Literal, NamedTuple, cast

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from shared import tracing
from shared.models import (
    CitationMetrics,
    ParsedDocument,
    SearchHit,
    SearchParameters,
    Source,
    described,
)


def new_trace_id() -> str:
    """The current OpenTelemetry trace id when tracing is on (logs and traces then share it), else a new id."""
    return tracing.current_trace_id() or uuid.uuid4().hex


def _now() -> datetime:
    return datetime.now(UTC)


def pack_array(values: npt.ArrayLike, dtype: str) -> str:
    """Base64 (RFC 4648) of ``values`` as ``dtype`` (little-endian), the packed form of an event field."""
    return base64.b64encode(np.ascontiguousarray(values, dtype=dtype).tobytes()).decode("ascii")


def unpack_array(packed: str, dtype: str, field: str) -> npt.NDArray[Any]:
    """The values of a packed field, strictly decoded; ``ValueError`` naming ``field`` if it is malformed."""
    try:
        raw = binascii.a2b_base64(packed, strict_mode=True)
    except binascii.Error as exc:
        raise ValueError(f"{field} is not base64: {exc}") from exc
    size = np.dtype(dtype).itemsize
    if len(raw) % size:
        raise ValueError(f"{field} holds {len(raw)} bytes, not a whole number of {size}-byte values")
    return np.frombuffer(raw, dtype=dtype)


class Event(BaseModel):
    """Base of every event: version, trace id, when it was made."""

    model_config = ConfigDict(extra="ignore")

    schema_version: int
    trace_id: str = Field(default_factory=new_trace_id, min_length=1, max_length=64)
    created_at: datetime = Field(default_factory=_now)


# --- ingestion -------------------------------------------------------------------------------------


#: Options of a source request: PubMed and PMC read ``full_text`` (also fetch the open-access PMC full text of
#: the PMIDs found), Bookshelf reads ``publisher`` (the exact name whose Open Access books to ingest).
FULL_TEXT_OPTION = "full_text"
PUBLISHER_OPTION = "publisher"
#: A source's own search fields beside its ``query`` (ClinicalTrials.gov: ``query.cond``, ``query.intr``).
CONDITION_OPTION = "condition"
INTERVENTION_OPTION = "intervention"


class SourceRequest(BaseModel):
    """What to discover at one source: a query, ids, or what the source's options name."""

    model_config = ConfigDict(extra="ignore")

    source: Source = Field(description="The source to discover at (its name in the source registry).")
    query: str | None = Field(None, min_length=1, description="A query in the source's own search syntax.")
    ids: list[str] = Field(default_factory=list, description="Record ids at the source, given directly.")
    options: dict[str, str | bool] = Field(
        default_factory=dict,
        description=(
            "The source's own options: `full_text` (PubMed, PMC), `publisher` (Bookshelf), `condition` and "
            "`intervention` (ClinicalTrials.gov)."
        ),
    )

    @model_validator(mode="after")
    def _something(self) -> SourceRequest:
        named = (PUBLISHER_OPTION, CONDITION_OPTION, INTERVENTION_OPTION)
        if not self.query and not self.ids and not any(self.options.get(k) for k in named):
            raise ValueError(f"a {self.source} request needs a query, ids, a publisher, a condition or an intervention")
        return self


def ncbi_sources(
    *,
    query: str | None = None,
    pmids: Sequence[str] = (),
    database: Literal["pubmed", "pmc"] = "pubmed",
    full_text: bool = False,
    bookshelf_publisher: str | None = None,
) -> list[SourceRequest]:
    """The source requests of an NCBI-shaped ingest (the HTTP API's and version 1's fields): the query at
    ``database`` (with the PMIDs when that is PubMed), the PMIDs at PubMed, the publisher at Bookshelf."""
    options: dict[str, str | bool] = {FULL_TEXT_OPTION: True} if full_text else {}
    ids = list(pmids)
    out: list[SourceRequest] = []
    if query and database == "pmc":
        out.append(SourceRequest(source="pmc", query=query, options=options))
        query = None
    if query or ids:
        out.append(SourceRequest(source="pubmed", query=query, ids=ids, options=options))
    if bookshelf_publisher:
        out.append(SourceRequest(source="bookshelf", options={PUBLISHER_OPTION: bookshelf_publisher}))
    return out


def named_source(
    source: Source,
    *,
    query: str | None = None,
    ids: Sequence[str] = (),
    condition: str | None = None,
    intervention: str | None = None,
) -> SourceRequest:
    """The request at a source searched by its own fields (ClinicalTrials.gov): a query, ids, and the condition
    and intervention it names (blank ones left out)."""
    named = {CONDITION_OPTION: condition, INTERVENTION_OPTION: intervention}
    options: dict[str, str | bool] = {k: v for k, v in named.items() if v}
    return SourceRequest(source=source, query=query, ids=list(ids), options=options)


_V1_FIELDS = ("query", "pmids", "database", "full_text", "bookshelf_publisher")


class IngestRequested(Event):
    """A request to discover documents (topic ``ingest.requests``, keyed by job id).

    Version 2 names no source in its fields: ``sources`` lists what to discover at each source, the source's
    own options with it. Version 1 (``query``, ``pmids``, ``database``, ``full_text``, ``bookshelf_publisher``)
    is still read: it is turned into version 2 as it is validated (:func:`ncbi_sources`).
    """

    schema_version: Literal[2] = 2
    job_id: str
    sources: list[SourceRequest] = Field(min_length=1, description="What to discover, one request per source.")
    max_results: int = Field(500, ge=1, le=100_000, description="The most records taken from each query.")
    refresh: bool = Field(False, description="Fetch again even when already stored.")

    @model_validator(mode="before")
    @classmethod
    def _from_version_1(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "sources" in data:
            return data
        if data.get("schema_version", 1) != 1 and not any(k in data for k in _V1_FIELDS):
            return data
        v1 = IngestRequestedV1.model_validate(data)
        upgraded = {k: v for k, v in data.items() if k not in _V1_FIELDS}
        upgraded["schema_version"] = 2
        upgraded["sources"] = ncbi_sources(
            query=v1.query,
            pmids=v1.pmids,
            database=v1.database,
            full_text=v1.full_text,
            bookshelf_publisher=v1.bookshelf_publisher,
        )
        return upgraded

    def of(self, source: str) -> list[SourceRequest]:
        """The requests of this one for ``source``."""
        return [s for s in self.sources if s.source == source]


class IngestRequestedV1(Event):
    """Version 1 of :class:`IngestRequested`, NCBI-shaped; read only to be turned into version 2."""

    schema_version: Literal[1] = 1
    job_id: str
    query: str | None = Field(None, description="A PubMed query run through esearch.")
    pmids: list[str] = Field(default_factory=list, description="PMIDs given directly.")
    database: Literal["pubmed", "pmc"] = "pubmed"
    max_results: int = Field(500, ge=1, le=100_000)
    refresh: bool = Field(False, description="Fetch again even when already stored.")
    full_text: bool = Field(
        False, description="Also fetch the open-access PMC full text (JATS) of the discovered PMIDs."
    )
    bookshelf_publisher: str | None = Field(
        None,
        min_length=1,
        max_length=300,
        description=(
            "Ingest every NCBI Bookshelf Open Access book of this publisher "
            "(e.g. 'World Health Organization'), one document per NXML part."
        ),
    )

    @model_validator(mode="after")
    def _one_of(self) -> IngestRequestedV1:
        if not self.query and not self.pmids and not self.bookshelf_publisher:
            raise ValueError("an ingest request needs a query, PMIDs or a Bookshelf publisher")
        return self


class BookshelfPackageRequested(Event):
    """One Bookshelf Open Access package to read (topic ``bookshelf.packages``, keyed by job id and accession).

    A publisher ingest is split into one of these per package, so no handler call downloads a whole
    publisher (which outlasted the consumer's poll interval and ran twice after a rebalance).
    """

    schema_version: Literal[1] = 1
    job_id: str
    accession: str = Field(min_length=1, max_length=64)
    path: str = Field(min_length=1, max_length=1000, description="Package path relative to the Bookshelf base URL.")
    title: str = ""
    publisher: str = ""
    year: str = ""
    last_updated: str = ""
    refresh: bool = False


class PmidDiscovered(Event):
    """One PubMed id to fetch (topic ``pmids.discovered``, keyed by document id).

    Other systems may publish these directly; see ``docs/contracts.md``.
    """

    schema_version: Literal[1] = 1
    pmid: str = Field(pattern=r"^[1-9][0-9]{0,9}$", description="PubMed id, digits only.")
    job_id: str | None = None
    refresh: bool = False
    full_text: bool = Field(False, description="Also fetch the open-access PMC full text of this PMID.")

    @field_validator("pmid", mode="before")
    @classmethod
    def _strip(cls, v: Any) -> Any:
        return str(v).strip() if isinstance(v, str | int) else v

    @property
    def document_id(self) -> str:
        return f"pubmed:{self.pmid}"


DocumentFormat = Literal["pubmed-xml", "jats-xml", "bookshelf-nxml", "document-json", "clinicaltrials-json"]


class DocumentFetched(Event):
    """One raw document (topic ``documents.fetched``, keyed by document id).

    ``content`` is the raw record (one ``PubmedArticle``, one JATS ``article``, one Bookshelf
    ``book-part`` file) for the XML formats; ``document`` is the already-structured document for
    ``document-json`` (the JSON-lines import). Version 2 may carry ``content_ref`` instead of ``content``
    for a record too large for a Kafka message (claim check, :mod:`shared.claimcheck`); a version-1
    consumer refuses those rather than misread them.
    """

    schema_version: Literal[1, 2] = 1
    document_id: str
    source: Source
    source_id: str
    format: DocumentFormat
    content: str | None = None
    document: ParsedDocument | None = None
    job_id: str | None = None
    content_ref: str | None = Field(
        None,
        pattern=r"^sha256:[0-9a-f]{64}$",
        description=(
            "Version 2: the raw record is too large for a Kafka message and is stored once in PostgreSQL "
            "(`raw_documents`) under this reference instead of in `content` (claim check)."
        ),
    )
    content_bytes: int | None = Field(None, ge=0, description="Size of the referenced content in bytes (version 2).")

    @model_validator(mode="after")
    def _payload(self) -> DocumentFetched:
        if self.content_ref is not None:
            if self.schema_version < 2:
                raise ValueError("`content_ref` needs schema_version 2")
            if self.content is not None:
                raise ValueError("give the content once: `content` or `content_ref`")
            if self.format == "document-json":
                raise ValueError("format document-json carries `document`, not `content_ref`")
            return self
        if self.format == "document-json":
            if self.document is None:
                raise ValueError("format document-json needs `document`")
        elif not self.content:
            raise ValueError(f"format {self.format} needs `content`")
        return self


class DocumentDeleted(Event):
    """A document withdrawn at its source (a PubMed ``DeleteCitation``), topic ``documents.fetched``."""

    schema_version: Literal[1] = 1
    document_id: str
    source: Source
    source_id: str
    job_id: str | None = None


class ChunkCreated(Event):
    """One chunk to embed (topics ``chunks.created`` and ``chunks.reindex``, keyed by document id).

    Version 1 is this model as JSON. Version 2 is the same fields in a binary frame (the token ids as raw
    uint16/uint32 bytes, the text as raw UTF-8, the other fields as JSON metadata): see
    :mod:`shared.chunk_wire`, which writes it and reads both. The parser writes version 2; readers tell
    the two apart by the record's first byte.
    """

    schema_version: Literal[1, 2] = 1
    chunk_id: str
    document_id: str
    ordinal: int = Field(ge=0)
    text: str = Field(min_length=1, description="The embedding text: 'Document: ...\\nSection: ...\\n\\n...'.")
    token_count: int = Field(ge=0)
    job_id: str | None = None
    token_ids: list[int] | None = Field(
        None,
        description=(
            "Model input ids of `text` (special tokens included, truncated to the model's limit), made by "
            "the tokenizer of `token_model`; the embedder uses them only when that is its own model."
        ),
    )
    token_ids_u32: str | None = Field(
        None,
        description=(
            "`token_ids` packed: base64 (RFC 4648) of little-endian uint32 values; what the parser writes "
            "(about four times cheaper to read than a JSON list). An embedder older than this field ignores "
            "it and tokenises `text` itself."
        ),
    )
    token_model: str | None = Field(None, description="The embedding model whose tokenizer made the token ids.")
    target_model: str | None = Field(
        None,
        description=(
            "On `chunks.reindex` only: the embedding model to re-embed this chunk with "
            "(`evidentia reindex --model`); only embedders of that model embed it."
        ),
    )

    @model_validator(mode="after")
    def _packed_ids(self) -> ChunkCreated:
        if self.token_ids_u32 is not None:
            if self.token_ids is not None:
                raise ValueError("give the token ids once: `token_ids` or `token_ids_u32`")
            unpack_array(self.token_ids_u32, "<u4", "token_ids_u32")
        return self

    @staticmethod
    def pack_ids(ids: Sequence[int] | npt.NDArray[np.integer[Any]]) -> str:
        """``token_ids_u32`` of token ids."""
        return pack_array(ids, "<u4")

    def input_ids(self) -> npt.NDArray[np.uint32] | npt.NDArray[np.int64] | None:
        """The shipped token ids (either form: uint32 when packed, read-only), or None when there are none.

        Decoded again here (checked once while validating): keeping the decoded array on the event costs
        more than the decode (pydantic's private attributes are set and read through Python hooks).
        """
        if self.token_ids_u32:
            return unpack_array(self.token_ids_u32, "<u4", "token_ids_u32")
        if self.token_ids:
            return np.asarray(self.token_ids, dtype=np.int64)
        return None


class PackedVector(NamedTuple):
    """One event's own fields in :meth:`ChunkEmbedded.packed_json_batch` (``embedding_f32``: base64, ASCII bytes)."""

    trace_id: str
    chunk_id: str
    document_id: str
    embedding_f32: bytes
    job_id: str | None = None


_VECTOR_SLOT = PackedVector._fields.index("embedding_f32")
_json_str: Callable[[str], str] = json.encoder.encode_basestring  # type: ignore[attr-defined]
"""A str as JSON, what ``json.dumps(..., ensure_ascii=False)`` writes (non-ASCII kept, as pydantic does)."""


def _template(
    cls: type[ChunkEmbedded], model: str, dim: int, created_at: datetime, with_job: bool
) -> tuple[bytes, list[int]]:
    """Pydantic's JSON of one event with a placeholder in each per-event field, as a ``bytes % values`` form:
    ``(form, slots)``, slots as indices into :class:`PackedVector` in the order the form takes them."""
    names = [name for name in PackedVector._fields if with_job or name != "job_id"]
    marks = {name: _json_str(f"\x00{name}\x00") for name in names}
    text = cls.model_construct(
        schema_version=2,
        created_at=created_at,
        model=model,
        dim=dim,
        embedding=None,
        **cast(dict[str, Any], {name: f"\x00{name}\x00" for name in names}),
    ).model_dump_json(exclude_none=True)
    located = sorted((text.index(mark), name) for name, mark in marks.items())
    parts: list[bytes] = []
    start = 0
    for at, name in located:
        parts.append(text[start:at].encode().replace(b"%", b"%%"))
        start = at + len(marks[name])
    parts.append(text[start:].encode().replace(b"%", b"%%"))
    return b"%b".join(parts), [PackedVector._fields.index(name) for _, name in located]


class ChunkEmbedded(Event):
    """One chunk's vector (topic ``chunks.embedded``, keyed by document id).

    Version 2 carries the vector packed (``embedding_f32``: base64 of ``dim`` little-endian float32
    values, 2 KB for 384-d instead of ~8 KB of decimal text, and about six times cheaper to write and to
    read); version 1 carries it as a JSON list (``embedding``). Consumers accept both; an embedder writes
    version 1 only when told to (``EVIDENTIA_EMBEDDING_VECTOR_ENCODING=list``) for consumers older than
    version 2. Read the vector with :meth:`vector`.
    """

    schema_version: Literal[1, 2] = 2
    chunk_id: str
    document_id: str
    model: str
    dim: int = Field(ge=1)
    embedding: list[float] | None = Field(None, description="The vector as numbers (version 1; the only form there).")
    embedding_f32: str | None = Field(
        None,
        description="The vector packed: base64 (RFC 4648) of `dim` little-endian IEEE-754 float32 values (version 2).",
    )
    job_id: str | None = None

    @model_validator(mode="after")
    def _dim(self) -> ChunkEmbedded:
        if (self.embedding is None) == (self.embedding_f32 is None):
            raise ValueError("exactly one of `embedding` and `embedding_f32` must be given")
        if self.embedding_f32 is not None:
            if self.schema_version < 2:
                raise ValueError("`embedding_f32` needs schema_version 2")
            values = unpack_array(self.embedding_f32, "<f4", "embedding_f32")
            if len(values) != self.dim:
                raise ValueError(f"embedding_f32 holds {4 * len(values)} bytes, dim {self.dim} needs {4 * self.dim}")
            if not np.isfinite(values).all():
                raise ValueError("embedding_f32 holds a value that is not finite")
        elif self.embedding is not None:
            if len(self.embedding) != self.dim:
                raise ValueError(f"embedding has {len(self.embedding)} values, dim says {self.dim}")
            values = np.asarray(self.embedding, dtype=np.float64)
            if not np.isfinite(values).all():  # JSON parsers accept NaN; pgvector refuses it (for the batch)
                raise ValueError("embedding holds a value that is not finite")
        if not np.any(values):
            raise ValueError("the embedding is all zeros: it has no direction to compare by cosine")
        return self

    @classmethod
    def pack(cls, vector: npt.ArrayLike) -> str:
        """``embedding_f32`` of a vector: base64 of its little-endian float32 bytes."""
        return pack_array(vector, "<f4")

    @classmethod
    def pack_rows(cls, rows: npt.ArrayLike) -> list[bytes]:
        """:meth:`pack` of each row of a matrix, as ASCII bytes, in one base64 call when a row is a whole
        number of 3-byte groups (384-d, 768-d: base64 of the whole buffer is then the rows' base64 strings end
        to end, none padded); row by row otherwise (e.g. 1024-d)."""
        matrix = np.ascontiguousarray(rows, dtype="<f4")
        row_bytes = matrix.shape[1] * 4 if matrix.ndim == 2 else 0
        if not len(matrix) or row_bytes % 3:
            return [cls.pack(row).encode() for row in matrix]
        text = base64.b64encode(matrix.tobytes())
        width = row_bytes // 3 * 4
        return [text[i : i + width] for i in range(0, len(text), width)]

    @classmethod
    def packed_json_batch(
        cls, *, model: str, dim: int, created_at: datetime, items: Sequence[PackedVector]
    ) -> list[bytes]:
        """Version-2 JSON of events that share ``model``, ``dim`` and ``created_at``: byte for byte what
        ``model_construct(...).model_dump_json(exclude_none=True)`` writes (tested), in a fraction of its time.

        The embedder's hot path: about 4 us an event with the batch's vectors packed (11 us through
        ``model_construct`` and ``model_dump_json`` per event; measured on the test machine).
        Pydantic renders one event per batch with placeholders; each event then only fills in its ids
        (JSON-escaped) and its vector (base64 needs no escaping). The caller has checked the vectors
        (shape, finite) for the whole batch, as for ``model_construct``.
        """
        templates: dict[bool, tuple[bytes, list[int]]] = {}
        out: list[bytes] = []
        for item in items:
            with_job = item.job_id is not None
            if with_job not in templates:
                templates[with_job] = _template(cls, model, dim, created_at, with_job)
            form, slots = templates[with_job]
            values: tuple[Any, ...] = item
            out.append(
                form
                % tuple(
                    b'"' + values[slot] + b'"' if slot == _VECTOR_SLOT else _json_str(values[slot]).encode()
                    for slot in slots
                )
            )
        return out

    def vector(self) -> npt.NDArray[np.float32]:
        """The vector as float32, whichever form it came in."""
        if self.embedding_f32 is not None:
            return unpack_array(self.embedding_f32, "<f4", "embedding_f32").astype(np.float32)
        return np.asarray(self.embedding, dtype=np.float32)


# --- request/reply -----------------------------------------------------------------------------------


class ErrorInfo(BaseModel):
    type: str
    message: str
    status: int = Field(500, description="HTTP status the gateway should answer with.")


class TokenUsage(BaseModel):
    """Tokens of one or more Claude calls, as the Messages API counts them (its ``usage`` field names)."""

    input_tokens: int = Field(0, ge=0, description="Input tokens billed at the full rate (after any cache hit).")
    output_tokens: int = Field(0, ge=0, description="Tokens generated.")
    cache_read_input_tokens: int = Field(0, ge=0, description="Input tokens read from the prompt cache.")
    cache_creation_input_tokens: int = Field(0, ge=0, description="Input tokens written to the prompt cache.")

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_input_tokens=self.cache_read_input_tokens + other.cache_read_input_tokens,
            cache_creation_input_tokens=self.cache_creation_input_tokens + other.cache_creation_input_tokens,
        )

    @classmethod
    def total(cls, calls: Sequence[LlmCall]) -> TokenUsage:
        out = cls()
        for call in calls:
            out = out + call.usage
        return out


class LlmCall(BaseModel):
    """One call to the Messages API made for an answer: which service made it, for which step, on which model."""

    service: str = Field(description="The service that made the call (retriever, synthesizer).")
    step: str = Field(description="What the call was for: answer, summary, support_check, rewrite, classify...")
    model: str = Field(description="The model that answered (as the API reports it).")
    usage: TokenUsage = Field(default_factory=TokenUsage)
    ok: bool = Field(True, description="False: the call failed or was cut off (the tokens are what was counted).")


class RetrievalRequest(Event, SearchParameters):
    """A search (topic ``retrieval.requests``; reply to the ``reply_to`` header's topic)."""

    model_config = ConfigDict(
        json_schema_extra=described(
            {
                "query": "The question as written; may be left out when `query_form` is given (the retriever renders "
                "it).",
                "query_form": (
                    "A structured query (therapeutic: drug + disease; condition-findings): the retriever renders it "
                    "(embeds its template, matches its terms lexically) and sends the text back as `rendered_query`."
                ),
                "reranker": "Reranker for `hybrid+rerank`; default: the retriever's setting.",
                "mmr": "Diversify the top_n with maximal marginal relevance.",
                "mmr_lambda": "MMR trade-off; default: the setting.",
            }
        )
    )

    schema_version: Literal[1] = 1
    extra_chunk_ids: list[str] = Field(default_factory=list, description="Chunks to add (cited earlier).")


class RetrievalReply(Event):
    schema_version: Literal[1] = 1
    hits: list[SearchHit] = Field(default_factory=list)
    model: str | None = None
    took_ms: float = 0.0
    error: ErrorInfo | None = None
    llm_calls: list[LlmCall] = Field(
        default_factory=list, description="Claude calls the search made (the LLM reranker), with their tokens."
    )
    rendered_query: str | None = Field(
        None, description="The query as the retriever searched it: the query form rendered, or the question."
    )


class CitationSpan(BaseModel):
    """One claim of an answer tied to the sentence of a source it rests on.

    ``answer_start``/``answer_end`` locate the claim in the reply's ``answer`` (the text citing by id);
    ``start``/``end`` locate ``quote`` in the stored text of the chunk ``chunk_id`` (the retrieved passage's
    ``text``), ``document_start``/``document_end`` in the document's full text where the chunk's place in it is
    known. A claim the source does not appear to support has ``supported`` false and no quote.
    """

    claim: str = Field(description="The answer's sentence, without its citations.")
    answer_start: int = Field(ge=0, description="Where the claim (with its citations) starts in `answer`.")
    answer_end: int = Field(ge=0, description="Where it ends in `answer` (exclusive).")
    document_id: str
    chunk_id: str | None = Field(None, description="The passage quoted; None when no sentence supports the claim.")
    section: str | None = Field(
        None, description="The passage's section: its title path for guidelines and PMC articles (`A > B > C`)."
    )
    quote: str | None = Field(None, description="The source's sentence the claim rests on, as stored.")
    start: int | None = Field(None, ge=0, description="Where `quote` starts in the chunk's stored text.")
    end: int | None = Field(None, ge=0, description="Where it ends there (exclusive).")
    document_start: int | None = Field(
        None, ge=0, description="Where `quote` starts in the document's full text (None: the chunk's place unknown)."
    )
    document_end: int | None = Field(None, ge=0, description="Where it ends there (exclusive).")
    supported: bool | None = Field(
        description="True: `quote` supports the claim; False: no sentence of the source does (no quote); None: the "
        "claim was not checked (the support check off, or past its claim limit): `quote` is the closest sentence."
    )
    score: float | None = Field(None, ge=0, le=1, description="How well `quote` matches the claim, 0-1.")
    method: Literal["quote", "similarity", "lexical", "llm"] | None = Field(
        None,
        description="`quote`: the claim is the sentence itself (extractive answers); otherwise the claim-support "
        "check's method that judged it, the sentence being its best match.",
    )


class Citation(BaseModel):
    number: int = Field(
        ge=1,
        description=(
            "Display number [n]: a source new to the conversation is numbered after those cited before, strongest "
            "evidence first (its `evidence_level` among the sources; unknown counts as 0.5), equal evidence in "
            "order of first appearance."
        ),
    )
    citation_id: str = Field(description="PMID:..., PMCID:... or NBK:...")
    document_id: str
    title: str
    journal: str | None = None
    year: int | None = None
    url: str | None = None
    citation_metrics: CitationMetrics | None = Field(
        None, description="The source's NIH iCite citation metrics, when imported for its PMID."
    )
    text: str | None = Field(
        None, description="The answer's first sentence citing this source, without its citations (None: a reference)."
    )
    start: int | None = Field(None, ge=0, description="Where that sentence starts in `answer`.")
    end: int | None = Field(None, ge=0, description="Where it ends in `answer` (exclusive).")
    created_at: datetime | None = Field(None, description="When the answer citing it was composed (UTC).")
    spans: list[CitationSpan] = Field(
        default_factory=list,
        description="Each claim of the answer citing this source, with the source's sentence it rests on.",
    )


class UnsupportedClaim(BaseModel):
    """A cited sentence that the passages it cites do not appear to support."""

    sentence: str = Field(description="The sentence, without its citations.")
    citation_ids: list[str] = Field(default_factory=list, description="The (verified) ids it cites.")
    score: float = Field(description="Support score against the cited passages, 0-1; below the threshold.")
    threshold: float = Field(description="The threshold the score fell below.")
    method: Literal["similarity", "lexical", "llm"] = Field(
        description="`similarity` (embedding + lexical overlap), `lexical` (no embedding model), `llm` (Claude)."
    )


class CitationCheck(BaseModel):
    cited: list[str] = Field(default_factory=list, description="Every id the answer cited, in any form.")
    verified: list[str] = Field(default_factory=list, description="Cited ids that were among the sources.")
    removed: list[str] = Field(
        default_factory=list, description="Cited ids that were not (in the answer, stream or summary); taken out."
    )
    uncited_sentences: list[str] = Field(default_factory=list)
    unsupported: list[UnsupportedClaim] = Field(
        default_factory=list, description="Cited sentences the cited passages do not appear to support."
    )
    support_method: Literal["similarity", "lexical", "llm"] | None = Field(
        None, description="How claim support was checked; None when it was not (no cited sentence, or turned off)."
    )
    claims_checked: int = Field(0, ge=0, description="Cited sentences scored for support.")


EvidenceStrength = Literal["high", "moderate", "low", "insufficient"]


class KeyFinding(BaseModel):
    """One finding of an evidence summary and the sources it rests on."""

    finding: str = Field(min_length=1, description="The finding, in one or two sentences.")
    supporting_pmids: list[str] = Field(
        default_factory=list,
        description="Ids of the sources that support it: PMIDs (digits), or PMCID:/NBK: ids for sources without one.",
    )


class EvidenceSummary(BaseModel):
    """A structured summary of the evidence behind an answer (``EvidenceSummary``).

    In LLM mode Claude fills it through tool use with this model's JSON schema; offline it is built
    from the retrieved sources' metadata and the extracted sentences (``method`` says which).
    """

    summary: str = Field(description="Two or three sentences: what the retrieved studies show, and how firmly.")
    study_count: int = Field(ge=0, description="Number of distinct studies the summary rests on.")
    study_types: list[str] = Field(
        default_factory=list, description="Kinds of study among them, e.g. meta-analysis, randomized-controlled-trial."
    )
    strength: EvidenceStrength = Field(
        description="Strength of the evidence: high (consistent meta-analyses/systematic reviews or several RCTs), "
        "moderate (an RCT or consistent controlled studies), low (observational, small or conflicting studies), "
        "insufficient (the sources do not answer the question)."
    )
    key_findings: list[KeyFinding] = Field(
        default_factory=list, description="The main findings, each with its sources."
    )
    supporting_pmids: list[str] = Field(default_factory=list, description="Every source id the summary rests on.")
    method: Literal["llm", "extractive"] = Field(
        "llm", description="llm (written by Claude through tool use) or extractive (built without a model)."
    )


AgreementLabel = Literal["supports", "contradicts", "mixed", "not_addressed"]
AGREEMENT_LABELS: tuple[AgreementLabel, ...] = ("supports", "contradicts", "mixed", "not_addressed")


class SourceAgreement(BaseModel):
    """How one cited source stands to the answer's main finding."""

    citation_id: str
    number: int | None = Field(None, ge=1, description="The source's display number [n] in the conversation.")
    label: AgreementLabel = Field(
        description="`supports`, `contradicts`, `mixed` (part for, part against) or `not_addressed` (the source "
        "does not speak to the main finding)."
    )
    reason: str | None = Field(None, description="The model's one-line reason, as given.")


class AgreementCounts(BaseModel):
    supports: int = 0
    contradicts: int = 0
    mixed: int = 0
    not_addressed: int = 0


class Agreement(BaseModel):
    """Where the cited sources agree and disagree on the answer's main finding (answers citing two or more).

    Labelled by Claude through a forced tool call, strictly checked: only ids among the answer's cited sources
    are kept, one label each; the rest are dropped and counted. Offline, for a single source, or when the call
    gave nothing usable, ``labels`` is empty and ``reason`` says why: no label is ever guessed.
    """

    status: Literal["labelled", "offline", "single-source", "failed"] = Field(
        description="`labelled`; `offline` (no language model); `single-source` (fewer than two cited sources); "
        "`failed` (the labelling call failed or returned no valid label)."
    )
    reason: str | None = Field(None, description="Why there are no labels (every status but `labelled`).")
    main_finding: str | None = Field(None, description="The answer's main finding the labels refer to.")
    labels: list[SourceAgreement] = Field(default_factory=list, description="One per labelled source, by number.")
    counts: AgreementCounts = Field(default_factory=AgreementCounts)
    disagree: bool = Field(False, description="Some source contradicts the main finding, or is mixed on it.")
    unlabelled: list[str] = Field(default_factory=list, description="Cited sources the model gave no valid label.")
    dropped: int = Field(
        0, ge=0, description="Labels dropped: for ids not among the cited sources, repeated, or not a valid label."
    )
    model: str | None = None


class ChatTurn(BaseModel):
    """One earlier turn of a conversation, given to the model as context."""

    role: Literal["user", "assistant"]
    content: str


class SynthesisRequest(Event):
    """Compose an answer from retrieved passages (topic ``synthesis.requests``)."""

    schema_version: Literal[1] = 1
    question: str = Field(min_length=1, max_length=10_000)
    passages: list[SearchHit] = Field(default_factory=list)
    stream: bool = False
    history: list[ChatTurn] = Field(
        default_factory=list, description="Earlier turns of the conversation (oldest first), for the model."
    )
    citation_numbers: dict[str, int] = Field(
        default_factory=dict,
        description="Display numbers already given in this conversation (citation id -> n), kept stable.",
    )
    summarize: bool = Field(True, description="Also produce the structured evidence summary.")
    draft: str | None = Field(
        None,
        max_length=50_000,
        description="An answer already written from `passages` (the gateway agent's, Claude having chosen the "
        "tools): not composed again but checked as a composed one is (its citations verified and numbered, its "
        "claims' support checked, each citation tied to the sentences it rests on), against every given passage.",
    )


class EmergencyCheck(BaseModel):
    """Why the emergency guard answered with the advice to call emergency services (``shared.safety``)."""

    reason: str = Field(description="The guard's reason in words, with the cues it rests on.")
    situation: str = Field(description='The acute situation recognised, e.g. "signs of a stroke".')
    person: str = Field(description="Whom it happens to: the writer, someone with the writer, or unknown.")
    probability: float | None = Field(
        None, description="The semantic model's probability that this is an emergency (None: rules only)."
    )


class SynthesisReply(Event):
    schema_version: Literal[1] = 1
    answer: str = ""
    mode: Literal["llm", "extractive", "insufficient-evidence", "emergency"] = "extractive"
    model: str | None = None
    citations: list[Citation] = Field(default_factory=list)
    citation_check: CitationCheck = Field(default_factory=CitationCheck)
    disclaimer: str = ""
    took_ms: float = 0.0
    error: ErrorInfo | None = None
    numbered_answer: str | None = Field(
        None, description="The answer with its citations as conversation-wide display numbers [1], [2]..."
    )
    summary: EvidenceSummary | None = Field(None, description="The structured evidence summary.")
    time_to_first_token_ms: float | None = Field(None, description="From request to the first token (streamed).")
    emergency: EmergencyCheck | None = Field(
        None, description="Set when the emergency guard answered (mode `emergency`): the guard's reason."
    )
    llm_calls: list[LlmCall] = Field(
        default_factory=list,
        description="Claude calls made for this answer (answer, summary, support check), with their tokens.",
    )
    agreement: Agreement | None = Field(
        None, description="Where the cited sources agree and disagree on the main finding (None: no answer)."
    )


LlmStepName = Literal[
    "classify",
    "organ",
    "search_terms",
    "enhance",
    "normalise_disease",
    "broader_disease",
    "assessment",
    "extract_findings",
    "differentials",
    "rewrite_followup",
    "agent_turn",
]


class LlmStepRequest(Event):
    """Run one LLM step of a workflow (topic ``llm.steps.requests``; reply to the ``reply_to`` header's topic).

    The synthesizer owns each step's prompt, tool schema and model; the caller sends only the step's inputs.
    """

    schema_version: Literal[1] = 1
    step: LlmStepName = Field(description="Which step: its inputs are named in services/synthesizer/steps.py.")
    inputs: dict[str, Any] = Field(default_factory=dict, description="The step's inputs (JSON values).")


class LlmStepReply(Event):
    schema_version: Literal[1] = 1
    output: dict[str, Any] | None = Field(
        None, description="The step's result; None without an API key or when the call failed (use the rules)."
    )
    model: str | None = Field(None, description="The model asked.")
    error: ErrorInfo | None = None
    llm_calls: list[LlmCall] = Field(default_factory=list, description="Claude calls made, with their tokens.")


class SynthesisToken(Event):
    """One piece of a streamed answer, published on the reply topic before the final reply."""

    schema_version: Literal[1] = 1
    seq: int = Field(ge=0)
    text: str


class RequestProgress(Event):
    """Published on the reply topic while a request is being worked on, every ``request_progress_every_s``.

    A lease: the caller resends a request whose server has gone silent (killed mid-request) and leaves one
    alone that is only slow (a long model answer keeps sending progress). Callers never show it to anyone.
    """

    schema_version: Literal[1] = 1
    elapsed_ms: float = Field(0.0, ge=0, description="Time the server has spent on the request so far.")


class NcbiCountRequest(Event):
    """How many PubMed records a query matches (topic ``ncbi.requests``; reply to ``reply_to``).

    Served by the fetcher, the only service that talks to NCBI (``esearch rettype=count``).
    """

    schema_version: Literal[1] = 1
    term: str = Field(min_length=1, max_length=4000, description="An E-utilities search term.")
    database: Literal["pubmed", "pmc"] = "pubmed"
    max_ids: int = Field(
        0,
        ge=0,
        le=1000,
        description="Also return the ids of the best matches, at most this many, in relevance order (esearch "
        "``sort=relevance``); 0: the count only.",
    )


class NcbiCountReply(Event):
    schema_version: Literal[1] = 1
    term: str = ""
    count: int = Field(0, ge=0)
    ids: list[str] = Field(default_factory=list, description="The best matches (``max_ids`` asked), best first.")
    error: ErrorInfo | None = None


# --- dead letters -------------------------------------------------------------------------------------


class DeadLetter(Event):
    """An event that could not be processed (topic ``<topic>.dlq``), with why and where it came from.

    The original body is carried once: a JSON body as JSON in ``payload_json`` (not escaped into a
    string a second time, which made a near-limit event's dead letter exceed Kafka's message size),
    any other body as text in ``payload``. A body over the dead-letter payload limit
    (``EVIDENTIA_KAFKA_DLQ_MAX_PAYLOAD_BYTES``) is cut (``payload_truncated``); ``payload_sha256`` and
    ``payload_bytes`` always describe the whole original, so ``evidentia dlq replay`` can fetch it back
    from ``topic``/``partition``/``offset`` while the topic still retains it, and check it.

    Version 2 added ``payload_json``; a reader gets ``payload`` filled from it either way.
    """

    schema_version: Literal[1, 2] = 2
    topic: str
    partition: int | None = None
    offset: int | None = None
    key: str | None = None
    service: str
    error_type: str
    error: str
    attempts: int
    payload: str = Field(
        "",
        description=(
            "The original body as UTF-8 text (with replacement characters where it is not UTF-8) when it is not "
            "JSON; in memory also the text of `payload_json`. Cut at the payload limit when `payload_truncated`."
        ),
    )
    payload_json: Any = Field(None, description="The original body when it is JSON, carried as JSON (version 2).")
    payload_bytes: int | None = Field(None, ge=0, description="Size of the whole original body in bytes.")
    payload_sha256: str | None = Field(None, description="SHA-256 (hex) of the whole original body.")
    payload_truncated: bool = Field(False, description="`payload` holds only the start of the original body.")
    headers: dict[str, str] = Field(default_factory=dict, description="The original record's headers, as text.")

    @model_validator(mode="after")
    def _text(self) -> DeadLetter:
        if self.payload_json is not None and not self.payload:
            self.payload = json.dumps(self.payload_json, ensure_ascii=False, separators=(",", ":"))
        return self

    def wire(self) -> bytes:
        """The letter as published: the body once (``payload`` left out when ``payload_json`` holds it)."""
        exclude = {"payload"} if self.payload_json is not None else None
        return self.model_dump_json(exclude=exclude).encode("utf-8")

    def original(self) -> bytes | None:
        """The original body (a JSON body re-serialised: the same value), or None when this letter does not
        hold all of it (truncated, or bytes that were not UTF-8)."""
        if self.payload_truncated:
            return None
        body = self.payload.encode("utf-8")
        if self.payload_json is not None:
            return body
        if self.payload_sha256 is not None and hashlib.sha256(body).hexdigest() != self.payload_sha256:
            return None  # replacement characters: the letter's text is not the original bytes
        return body


PIPELINE_EVENTS: tuple[type[Event], ...] = (
    IngestRequested,
    BookshelfPackageRequested,
    PmidDiscovered,
    DocumentFetched,
    DocumentDeleted,
    ChunkCreated,
    ChunkEmbedded,
    RetrievalRequest,
    RetrievalReply,
    SynthesisRequest,
    SynthesisReply,
    SynthesisToken,
    LlmStepRequest,
    LlmStepReply,
    RequestProgress,
    NcbiCountRequest,
    NcbiCountReply,
    DeadLetter,
)
