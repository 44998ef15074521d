"""Retrieval evaluation on BEIR-format data sets (and PubMedQA) through the project's own code path.

The corpus goes through the parser's document-json path (``ParsedDocument`` from title + text, then
``chunk_document`` with the configured chunker, whose cap follows the embedding model's window), is stored
with the parser's ``store_document`` (so the BM25 postings are built by the store's triggers), embedded with
the configured embedder into a fresh HNSW index in its own database (a throw-away PostgreSQL in a temp dir,
or a fresh database on a given server), and every query runs through the real :class:`SearchEngine`.

Scores are per document: a document's rank is that of its best chunk (``max_chunks_per_document=1``).
Metrics: nDCG@10, Recall@100, MRR@10 (``ir-measures``/trec_eval when installed, else the implementations
below, which the unit tests check against hand-computed cases), plus Recall@k for the k asked for.

Embeddings are cached on disk by (model, text) so re-running other modes or fusion settings skips the
encoder; ``--no-cache`` measures the whole run.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import hashlib
import json
import logging
import math
import os
import re
import secrets
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import numpy as np

from devstack.common import free_port
from evaluation.folds import CrossValidation, cross_validate
from services.retriever.engine import (
    CorpusStats,
    EmbeddingReranker,
    LegMemo,
    Reranker,
    SearchEngine,
    build_reranker,
    create_index,
    live_probes,
    maintain_ann_index,
    upsert_vectors,
    vector_table_bytes,
)
from shared.models import MeshHeading, ParsedDocument, SearchFilters
from shared.settings import Settings

log = logging.getLogger(__name__)

MODES = ("bm25", "dense", "hybrid", "hybrid+rerank")
_SEARCH_MODE = {"bm25": "lexical", "dense": "dense", "hybrid": "hybrid", "hybrid+rerank": "hybrid+rerank"}
Qrels = dict[str, dict[str, int]]
Run = dict[str, dict[str, float]]


# ---------------------------------------------------------------------------------------------- metrics
def ndcg_at_k(qrels: Mapping[str, int], ranking: Sequence[str], k: int) -> float:
    """nDCG@k with gain = relevance grade (trec_eval's ``ndcg_cut``), log2(rank + 1) discount."""
    dcg = sum(qrels.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranking[:k]) if qrels.get(d, 0) > 0)
    ideal = sorted((g for g in qrels.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at_k(qrels: Mapping[str, int], ranking: Sequence[str], k: int) -> float:
    relevant = {d for d, g in qrels.items() if g > 0}
    if not relevant:
        return 0.0
    return len(relevant.intersection(ranking[:k])) / len(relevant)


def mrr_at_k(qrels: Mapping[str, int], ranking: Sequence[str], k: int) -> float:
    for i, d in enumerate(ranking[:k]):
        if qrels.get(d, 0) > 0:
            return 1.0 / (i + 1)
    return 0.0


def _ranking(run: Mapping[str, float]) -> list[str]:
    # trec_eval's order: score descending, then document id descending.
    return [d for d, _ in sorted(run.items(), key=lambda kv: (-kv[1], _neg(kv[0])))]


def _neg(s: str) -> tuple[int, ...]:
    return tuple(-ord(c) for c in s)


def compute_metrics_builtin(qrels: Qrels, run: Run, recall_ks: Sequence[int] = ()) -> dict[str, float]:
    """Mean nDCG@10, Recall@100, MRR@10 (and Recall@k) over the queries of ``qrels`` with a relevant doc."""
    queries = [q for q, rels in qrels.items() if any(g > 0 for g in rels.values())]
    sums: dict[str, float] = {"nDCG@10": 0.0, "Recall@100": 0.0, "MRR@10": 0.0}
    sums.update({f"Recall@{k}": 0.0 for k in recall_ks})
    for q in queries:
        ranking = _ranking(run.get(q, {}))
        sums["nDCG@10"] += ndcg_at_k(qrels[q], ranking, 10)
        sums["Recall@100"] += recall_at_k(qrels[q], ranking, 100)
        sums["MRR@10"] += mrr_at_k(qrels[q], ranking, 10)
        for k in recall_ks:
            sums[f"Recall@{k}"] += recall_at_k(qrels[q], ranking, k)
    return {m: (v / len(queries) if queries else 0.0) for m, v in sums.items()}


def per_query_metrics(qrels: Qrels, run: Run, recall_ks: Sequence[int] = ()) -> dict[str, dict[str, float]]:
    """Each judged question's nDCG@10, Recall@100, MRR@10 (and Recall@k): what the fold protocol averages."""
    out: dict[str, dict[str, float]] = {}
    for q, rels in qrels.items():
        if not any(g > 0 for g in rels.values()):
            continue
        ranking = _ranking(run.get(q, {}))
        row = {
            "nDCG@10": ndcg_at_k(rels, ranking, 10),
            "Recall@100": recall_at_k(rels, ranking, 100),
            "MRR@10": mrr_at_k(rels, ranking, 10),
        }
        row.update({f"Recall@{k}": recall_at_k(rels, ranking, k) for k in recall_ks})
        out[q] = row
    return out


def compute_metrics(qrels: Qrels, run: Run, recall_ks: Sequence[int] = ()) -> tuple[dict[str, float], str]:
    """The metrics and which implementation computed them (``ir-measures`` when it is installed)."""
    try:
        import ir_measures
        from ir_measures import RR, R, nDCG
    except ImportError:
        return compute_metrics_builtin(qrels, run, recall_ks), "builtin"
    names = {nDCG @ 10: "nDCG@10", R @ 100: "Recall@100", RR @ 10: "MRR@10"}
    names.update({R @ k: f"Recall@{k}" for k in recall_ks})
    judged = {q: rels for q, rels in qrels.items() if any(g > 0 for g in rels.values())}
    full_run = {q: run.get(q, {}) for q in judged}
    # ir-measures averages over every query of the qrels (a query with no result scores 0).
    agg = ir_measures.calc_aggregate(list(names), judged, full_run)
    return {label: float(agg.get(m, 0.0)) for m, label in names.items()}, "ir-measures"


# ---------------------------------------------------------------------------------------------- data sets
@dataclass
class Dataset:
    name: str
    corpus: dict[str, tuple[str, str]]
    """doc id -> (title, text)"""
    queries: dict[str, str]
    qrels: Qrels
    mesh: dict[str, list[str]] = field(default_factory=dict)
    """doc id -> its MeSH descriptors (PubMedQA's ``MESHES``; BEIR corpora have none): stored in
    ``documents.mesh_terms`` as the PubMed parser stores them (no effect on ranking: only a filter reads them)."""


def _open_text(path: Path) -> Any:
    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else path.open(encoding="utf-8")


def _read_jsonl(path: Path) -> Iterable[dict[str, Any]]:
    with _open_text(path) as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)


def _first_existing(*paths: Path) -> Path:
    for p in paths:
        if p.exists():
            return p
    raise FileNotFoundError(f"none of {', '.join(str(p) for p in paths)} exists")


def load_beir(directory: str | os.PathLike[str], split: str = "test") -> Dataset:
    """``corpus.jsonl[.gz]``, ``queries.jsonl`` (or ``queries.SPLIT.jsonl``), ``qrels/SPLIT.tsv``."""
    root = Path(directory)
    corpus_path = _first_existing(root / "corpus.jsonl", root / "corpus.jsonl.gz")
    queries_path = _first_existing(
        root / f"queries.{split}.jsonl",
        root / "queries.jsonl",
        root / f"queries.{split}.jsonl.gz",
        root / "queries.jsonl.gz",
    )
    qrels: Qrels = {}
    with (root / "qrels" / f"{split}.tsv").open(encoding="utf-8") as fh:
        for line in fh:
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 3 or parts[0] == "query-id":
                continue
            qrels.setdefault(parts[0], {})[parts[1]] = int(parts[2])
    queries = {str(q["_id"]): str(q["text"]) for q in _read_jsonl(queries_path) if str(q["_id"]) in qrels}
    qrels = {q: rels for q, rels in qrels.items() if q in queries}
    corpus = {str(d["_id"]): (str(d.get("title") or ""), str(d.get("text") or "")) for d in _read_jsonl(corpus_path)}
    return Dataset(f"{root.name}/{split}", corpus, queries, qrels)


def load_pubmedqa(path: str | os.PathLike[str], *, with_titles: bool = False) -> Dataset:
    """PubMedQA (``pqal_*.json``): each question's own abstract must be found among all the abstracts.

    The corpus is every question's contexts (the abstract less its conclusion); the article titles are left
    out by default because most PubMedQA questions are their article's title verbatim.
    """
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    corpus: dict[str, tuple[str, str]] = {}
    queries: dict[str, str] = {}
    qrels: Qrels = {}
    mesh: dict[str, list[str]] = {}
    for pmid, item in data.items():
        contexts = item.get("CONTEXTS") or []
        labels = item.get("LABELS") or []
        parts = [
            f"{label.title()}: {c}" if i < len(labels) else c
            for i, (c, label) in enumerate(zip(contexts, labels + [""] * len(contexts), strict=False))
        ]
        corpus[pmid] = (item["QUESTION"] if with_titles else "", " ".join(parts) if labels else " ".join(contexts))
        queries[pmid] = item["QUESTION"]
        qrels[pmid] = {pmid: 1}
        mesh[pmid] = [str(m) for m in item.get("MESHES") or []]
    return Dataset(f"pubmedqa/{Path(path).stem}", corpus, queries, qrels, mesh)


def load_dataset(path: str | os.PathLike[str], split: str) -> Dataset:
    p = Path(path)
    return load_pubmedqa(p) if p.is_file() and p.suffix == ".json" else load_beir(p, split)


def to_documents(ds: Dataset, *, study_types_from_titles: bool = False) -> list[ParsedDocument]:
    """Each corpus entry as the document-json import would bring it (title + abstract). BEIR corpora carry no
    publication types, so every document is unclassified (no evidence weight); ``study_types_from_titles``
    classifies each by its title as the parser classifies a PMC article without an article type
    (``classify_jats``: "meta-analysis", "randomized ... trial", "cohort" ...), so that evidence-aware ranking
    has something to act on."""
    from services.parser.evidence import classify_jats

    docs = []
    for doc_id, (title, text) in ds.corpus.items():
        mesh = [MeshHeading(descriptor=m) for m in ds.mesh.get(doc_id, [])]
        doc = ParsedDocument(source="pubmed", source_id=doc_id, title=title, abstract=text or None, mesh=mesh)
        if study_types_from_titles:
            study_type, weight = classify_jats(None, title)
            doc = doc.model_copy(update={"study_type": study_type, "evidence_level": weight})
        docs.append(doc)
    return docs


# ---------------------------------------------------------------------------------------------- embeddings
class EmbeddingCache:
    """Vectors by (model, text), in one ``.npz`` per model under ``directory`` (None: memory only)."""

    def __init__(self, directory: Path | None, model: str):
        self.path = None if directory is None else directory / f"{re.sub(r'[^A-Za-z0-9]+', '_', model)}.npz"
        self._vectors: dict[str, np.ndarray] = {}
        self._dirty = False
        if self.path is not None and self.path.exists():
            with np.load(self.path) as data:
                for key, vec in zip(data["keys"], data["vectors"], strict=True):
                    self._vectors[key.decode() if isinstance(key, bytes) else str(key)] = vec

    @staticmethod
    def key(kind: str, text: str) -> str:
        return hashlib.sha256(f"{kind}\x00{text}".encode()).hexdigest()[:32]

    def encode(self, kind: str, texts: Sequence[str], encode: Callable[[list[str]], np.ndarray]) -> np.ndarray:
        keys = [self.key(kind, t) for t in texts]
        missing = sorted({(k, t) for k, t in zip(keys, texts, strict=True) if k not in self._vectors})
        if missing:
            vectors = encode([t for _, t in missing])
            for (k, _), v in zip(missing, vectors, strict=True):
                self._vectors[k] = np.asarray(v, dtype=np.float32)
            self._dirty = True
        return np.stack([self._vectors[k] for k in keys]) if keys else np.zeros((0, 0), dtype=np.float32)

    def save(self) -> None:
        if self.path is None or not self._dirty:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        keys = np.asarray(list(self._vectors), dtype="S32")
        tmp = self.path.with_suffix(".tmp.npz")
        np.savez(tmp, keys=keys, vectors=np.stack(list(self._vectors.values())))
        tmp.replace(self.path)
        self._dirty = False


def default_cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "evidentia" / "eval"


# ---------------------------------------------------------------------------------------------- database
@contextlib.asynccontextmanager
async def fresh_database(url: str | None) -> AsyncIterator[str]:
    """A URL of an empty database: a new one on ``url``'s server (dropped after), or a throw-away
    PostgreSQL in a temp dir when ``url`` is None."""
    if url:
        name = f"evidentia_eval_{secrets.token_hex(4)}"
        admin = await asyncpg.connect(url)
        try:
            await admin.execute(f'CREATE DATABASE "{name}"')
        finally:
            await admin.close()
        parts = urlsplit(url)
        try:
            yield urlunsplit(parts._replace(path=f"/{name}"))
        finally:
            admin = await asyncpg.connect(url)
            try:
                await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            finally:
                await admin.close()
        return
    from devstack.postgres import LocalPostgres

    tmp = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="evidentia-eval-"))
    await asyncio.to_thread(tmp.chmod, 0o755)
    pg = LocalPostgres(tmp, port=free_port())
    await asyncio.to_thread(pg.start)
    try:
        yield pg.url
    finally:
        await asyncio.to_thread(pg.stop)
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------------------------- the run
@dataclass
class EvalConfig:
    modes: Sequence[str] = MODES
    database_url: str | None = None
    cache_dir: Path | None = field(default_factory=default_cache_dir)
    rerank_depth: int = 30
    """top_k of hybrid+rerank: candidates the reranker sees."""
    rerank_model: str | None = None
    """hybrid+rerank without a configured reranker: re-score with this second embedding model."""
    recall_ks: Sequence[int] = ()
    limit_queries: int | None = None
    concurrency: int = 4
    variants: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Extra runs on the same index: label -> RetrievalSettings overrides plus ``mode`` (fusion sweeps) and
    ``query_prefix`` (the queries encoded again with another prefix)."""
    folds: int | None = None
    """Cross-validate the choice among all modes and variants over this many folds of the questions."""
    fold_seed: int = 0
    study_types_from_titles: bool = False
    """Classify each document's study type (and evidence weight) by its title (:func:`to_documents`)."""


@dataclass
class ModeResult:
    mode: str
    metrics: dict[str, float]
    queries: int
    search_s: float
    reranker: str | None = None
    per_query: dict[str, dict[str, float]] = field(default_factory=dict)


@dataclass
class EvalReport:
    dataset: str
    model: str
    documents: int
    chunks: int
    metrics_impl: str
    timings_s: dict[str, float]
    results: list[ModeResult]
    cross_validation: CrossValidation | None = None
    #: The vector index searched: its precision and size on disk (table, HNSW and B-tree indexes, TOAST).
    vector_store: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        cv = {"cross_validation": self.cross_validation.as_dict()} if self.cross_validation else {}
        return {
            **cv,
            "dataset": self.dataset,
            "model": self.model,
            "documents": self.documents,
            "chunks": self.chunks,
            "metrics_impl": self.metrics_impl,
            "timings_s": {k: round(v, 2) for k, v in self.timings_s.items()},
            **({"vector_store": self.vector_store} if self.vector_store else {}),
            "modes": {
                r.mode: {
                    **{k: round(v, 4) for k, v in r.metrics.items()},
                    "queries": r.queries,
                    "search_s": round(r.search_s, 2),
                    "reranker": r.reranker,
                }
                for r in self.results
            },
        }


def eval_chunker(settings: Settings) -> Any:
    """The configured chunker, its tokenizer read from the model's own folder when the name is a known
    model that ``evidentia models fetch`` made (the tokenizer loader does not resolve those names)."""
    from services.parser.chunking import Chunker
    from services.parser.tokens import TokenizerError
    from shared.embedding.factory import resolve

    try:
        return Chunker.from_settings(settings.chunking, settings.embedding)
    except TokenizerError:
        folder = resolve(settings.embedding)[1].source
        chunking = settings.chunking.model_copy(update={"tokenizer": folder})
        return Chunker.from_settings(chunking, settings.embedding)


async def _store_all(pool: asyncpg.Pool, docs: Sequence[ParsedDocument], concurrency: int) -> None:
    from services.parser.store import store_document

    sem = asyncio.Semaphore(concurrency)

    async def one(doc: ParsedDocument) -> None:
        async with sem:
            await store_document(pool, doc)

    await asyncio.gather(*(one(d) for d in docs))


@dataclass
class IndexedStore:
    """A data set loaded, chunked, stored and embedded into a fresh index: what a run searches."""

    pool: asyncpg.Pool
    index: Any
    embedder: Any
    cache: EmbeddingCache
    documents: int
    chunks: int
    timings: dict[str, float]


@contextlib.asynccontextmanager
async def indexed_store(
    ds: Dataset,
    settings: Settings,
    config: EvalConfig,
    progress: Callable[[str], None] = lambda _m: None,
    *,
    embed: bool = True,
) -> AsyncIterator[IndexedStore]:
    """The corpus through the parser's chunker and store, embedded (through the cache) into a fresh HNSW
    index of a fresh database, which is dropped on exit. ``embed=False`` leaves the index empty (lexical
    runs need no encoder)."""
    from services.parser.core import chunk_document
    from shared.db import create_pool
    from shared.embedding import get_embedder

    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    embedder = get_embedder(settings.embedding)
    chunker = eval_chunker(settings)
    docs = [
        chunk_document(d, chunker) for d in to_documents(ds, study_types_from_titles=config.study_types_from_titles)
    ]
    timings["chunk"] = time.perf_counter() - t0
    progress(f"chunked {len(docs)} documents into {sum(len(d.chunks) for d in docs)} chunks ({timings['chunk']:.1f}s)")
    cache = EmbeddingCache(config.cache_dir, embedder.name)
    async with fresh_database(config.database_url) as url:
        db = settings.database.model_copy(update={"url": url, "pool_max": config.concurrency + 2})
        pool = await create_pool(db)
        try:
            t = time.perf_counter()
            await _store_all(pool, docs, config.concurrency)
            timings["store"] = time.perf_counter() - t
            rows = await pool.fetch("SELECT chunk_id, document_id, embedding_text FROM chunks ORDER BY chunk_id")
            progress(f"stored {len(rows)} chunks ({timings['store']:.1f}s); embedding with {embedder.name}")
            t = time.perf_counter()
            texts = [r["embedding_text"] for r in rows] if embed else []
            vectors = await asyncio.to_thread(cache.encode, "passage", texts, embedder.encode_passages)
            timings["embed_passages"] = time.perf_counter() - t
            cache.save()
            t = time.perf_counter()
            index = await create_index(pool, embedder.name, embedder.dim, db, activate=True)
            for i in range(0, len(texts), 2000):
                part = rows[i : i + 2000]
                await upsert_vectors(
                    pool, index, [r["chunk_id"] for r in part], [r["document_id"] for r in part], vectors[i : i + 2000]
                )
            await pool.execute("ANALYZE")
            await maintain_ann_index(pool, index, db)  # the configured HNSW or IVFFlat index, as a retriever keeps it
            timings["index"] = time.perf_counter() - t
            progress(f"indexed ({timings['embed_passages']:.1f}s embedding, {timings['index']:.1f}s {db.vector_index})")
            yield IndexedStore(pool, index, embedder, cache, len(docs), len(rows), timings)
        finally:
            await pool.close()


@dataclass
class ModelVectors:
    """A data set's chunks stored for one embedding model (its chunking), with their vectors and the questions'."""

    store: IndexedStore
    settings: Settings
    chunk_ids: list[str]
    doc_ids: list[str]
    """each chunk's document (its source id, as the qrels name it)"""
    passages: np.ndarray
    queries: np.ndarray
    """one row per question of ``query_ids``, in that order"""


@contextlib.asynccontextmanager
async def model_vectors(
    ds: Dataset, model: str, query_ids: Sequence[str], progress: Callable[[str], None] = lambda _m: None
) -> AsyncIterator[ModelVectors]:
    """The corpus chunked and stored as ``model`` would have it (no index built), with the vectors of its chunks
    and of the questions from the embedding cache (encoded where missing): what the benchmarks that compare
    models outside the searcher read (``bench/dense_ensembles.py``, ``bench/relevance_floor.py``)."""
    settings = Settings()
    settings = settings.model_copy(update={"embedding": settings.embedding.model_copy(update={"model": model})})
    config = EvalConfig(modes=("bm25",))
    async with indexed_store(ds, settings, config, progress, embed=False) as store:
        rows = await store.pool.fetch(
            "SELECT c.chunk_id, d.source_id, c.embedding_text FROM chunks c "
            "JOIN documents d ON d.document_id = c.document_id ORDER BY c.chunk_id"
        )
        cache = EmbeddingCache(config.cache_dir, store.embedder.name)
        passages = await asyncio.to_thread(
            cache.encode, "passage", [r["embedding_text"] for r in rows], store.embedder.encode_passages
        )
        queries = await asyncio.to_thread(
            _encode_queries, cache, store.embedder, [ds.queries[q] for q in query_ids], None
        )
        cache.save()
        yield ModelVectors(
            store,
            settings,
            [r["chunk_id"] for r in rows],
            [r["source_id"] for r in rows],
            passages,
            queries,
        )


async def evaluate(
    ds: Dataset, settings: Settings, config: EvalConfig, progress: Callable[[str], None] = lambda _m: None
) -> EvalReport:
    t0 = time.perf_counter()
    query_ids = sorted(ds.queries)[: config.limit_queries] if config.limit_queries else sorted(ds.queries)
    lexical_only = all(m == "bm25" for m in config.modes) and all(
        v.get("mode") == "bm25" for v in config.variants.values()
    )
    async with indexed_store(ds, settings, config, progress, embed=not lexical_only) as store:
        pool, index, embedder, cache, timings = store.pool, store.index, store.embedder, store.cache, store.timings
        t = time.perf_counter()
        qtexts = [] if lexical_only else [ds.queries[q] for q in query_ids]
        qvecs = await asyncio.to_thread(_encode_queries, cache, embedder, qtexts, None)
        timings["embed_queries"] = time.perf_counter() - t
        cache.save()
        legs = LegMemo()  # variants that change only the fusion, the feedback or the rerank reuse the legs
        searcher = SearchEngine.from_settings(
            pool,
            index,
            settings.retrieval,
            ef_search=max(settings.database.hnsw_ef_search, 200),
            ivfflat_probes=await live_probes(pool, index.table_name, settings.database),
            stats=CorpusStats(ttl_s=1e9),
            memo=legs,
        )
        results: list[ModeResult] = []
        impl = "builtin"
        for mode in config.modes:
            reranker = await _reranker_for(mode, settings, config)
            t = time.perf_counter()
            run = await _run_mode(searcher, ds, query_ids, qvecs, mode, config, reranker)
            elapsed = time.perf_counter() - t
            qrels = {q: ds.qrels[q] for q in query_ids}
            metrics, impl = compute_metrics(qrels, run, config.recall_ks)
            results.append(
                ModeResult(
                    mode,
                    metrics,
                    len(query_ids),
                    elapsed,
                    reranker.name if reranker else None,
                    per_query_metrics(qrels, run, config.recall_ks),
                )
            )
            progress(f"{mode}: " + "  ".join(f"{k} {v:.4f}" for k, v in metrics.items()) + f"  ({elapsed:.1f}s)")
        for label, overrides in config.variants.items():
            mode = str(overrides.get("mode", "hybrid"))
            r_settings = settings.retrieval.model_copy(
                update={k: v for k, v in overrides.items() if k not in ("mode", "query_prefix", *DATABASE_KEYS)}
            )
            db = settings.database.model_copy(update={k: v for k, v in overrides.items() if k in DATABASE_KEYS})
            variant = SearchEngine.from_settings(
                pool,
                index,
                r_settings,
                ef_search=searcher.config.ef_search,
                stats=searcher.stats,
                ivfflat_probes=await live_probes(pool, index.table_name, db),
                memo=legs,
            )
            vqvecs = qvecs
            if "query_prefix" in overrides:
                prefix = _prefix_of(str(overrides["query_prefix"]))
                vqvecs = await asyncio.to_thread(
                    _encode_queries, cache, embedder, [ds.queries[q] for q in query_ids], prefix
                )
                cache.save()
            reranker = await _reranker_for(mode, settings, config)
            t = time.perf_counter()
            run = await _run_mode(variant, ds, query_ids, vqvecs, mode, config, reranker)
            qrels = {q: ds.qrels[q] for q in query_ids}
            metrics, impl = compute_metrics(qrels, run, config.recall_ks)
            results.append(
                ModeResult(
                    f"{mode} {label}",
                    metrics,
                    len(query_ids),
                    time.perf_counter() - t,
                    reranker.name if reranker else None,
                    per_query_metrics(qrels, run, config.recall_ks),
                )
            )
            progress(f"{mode} {label}: " + "  ".join(f"{k} {v:.4f}" for k, v in metrics.items()))
        timings["total"] = time.perf_counter() - t0
        cv = None
        if config.folds:
            cv = cross_validate({r.mode: r.per_query for r in results}, config.folds, config.fold_seed)
        sizes = await vector_table_bytes(pool, index)
        vector_store: dict[str, Any] = {"precision": index.precision, "bytes": sizes["total"]}
        if store.chunks:
            vector_store |= {f"{k}_bytes_per_chunk": round(v / store.chunks, 1) for k, v in sizes.items()}
        return EvalReport(
            ds.name, embedder.name, store.documents, store.chunks, impl, timings, results, cv, vector_store
        )


#: Variant keys that are database settings (the dense leg's IVFFlat probes), not retrieval settings.
DATABASE_KEYS = ("ivfflat_probes", "ivfflat_probe_share")


def _prefix_of(text: str) -> str:
    """A variant's ``query_prefix``: ``none`` is no prefix; ``_`` stands for a space (``query:_``)."""
    return "" if text.lower() in ("", "none") else text.replace("_", " ")


def _encode_queries(cache: EmbeddingCache, embedder: Any, texts: list[str], prefix: str | None) -> np.ndarray:
    """Query vectors through the cache; the prefix is part of the cache key (``None``: the model's own)."""
    own = embedder.query_prefix
    use = own if prefix is None else prefix
    embedder.query_prefix = use
    try:
        return cache.encode(f"query\x00{use}", texts, embedder.encode_queries)
    finally:
        embedder.query_prefix = own


async def _reranker_for(mode: str, settings: Settings, config: EvalConfig) -> Reranker | None:
    if mode != "hybrid+rerank":
        return None
    if config.rerank_model:
        from shared.embedding import get_embedder
        from shared.settings import EmbeddingSettings

        second = get_embedder(EmbeddingSettings(model=config.rerank_model, threads=settings.embedding.threads))
        cache = EmbeddingCache(config.cache_dir, second.name)
        return EmbeddingReranker(_CachedEncoder(second, cache))
    return build_reranker(settings)


class _CachedEncoder:
    """A second embedding model whose query and passage vectors go through the on-disk cache (the reranker of
    ``--rerank-model``)."""

    def __init__(self, embedder: Any, cache: EmbeddingCache):
        self.name = embedder.name
        self.embedder = embedder
        self.disk = cache

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.disk.encode("query", list(texts), self.embedder.encode_queries)

    def encode_passages(self, texts: Sequence[str]) -> np.ndarray:
        return self.disk.encode("passage", list(texts), self.embedder.encode_passages)


async def _run_mode(
    searcher: SearchEngine,
    ds: Dataset,
    query_ids: Sequence[str],
    qvecs: np.ndarray,
    mode: str,
    config: EvalConfig,
    reranker: Reranker | None,
) -> Run:
    filters = SearchFilters(max_chunks_per_document=1)
    sem = asyncio.Semaphore(config.concurrency)
    run: Run = {}
    top_k = config.rerank_depth if mode == "hybrid+rerank" else 100

    async def one(i: int, qid: str) -> None:
        async with sem:
            result = await searcher.search(
                ds.queries[qid],
                qvecs[i] if len(qvecs) else None,
                mode=_SEARCH_MODE[mode],
                top_k=top_k,
                top_n=100,
                filters=filters,
                reranker=reranker,
            )
        run[qid] = {h.source_id: float(100 - h.rank) for h in result.hits}

    cached = reranker.embedder if isinstance(reranker, EmbeddingReranker) else None
    if isinstance(cached, _CachedEncoder):
        # The cache is not thread-safe and the encoder is the bottleneck anyway: one query at a time.
        for i, qid in enumerate(query_ids):
            await one(i, qid)
        cached.disk.save()
    else:
        await asyncio.gather(*(one(i, q) for i, q in enumerate(query_ids)))
    return run
