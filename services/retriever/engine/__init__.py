"""The retriever's search engine: a lexical index (BM25 over packed posting blocks, compaction, a postings
cache), vector tables (pgvector ANN indexes, their maintenance and probes), one declaration per search filter,
doc values, rankings (fusion, feedback, blends, rerank, MMR) and a pipeline that composes them.

The names below are its public API: what the service shell, the evaluation and the benchmarks build on
(``pyproject.toml``'s import contracts hold the evaluation to them). The subpackages are the engine's own.
"""

from services.retriever.engine.config import SearchConfig
from services.retriever.engine.lexical.stats import CorpusStats
from services.retriever.engine.memo import LegMemo
from services.retriever.engine.pipeline import STAGES, SearchEngine, SearchResult
from services.retriever.engine.ranking.rerank import EmbeddingReranker, Reranker, build_reranker
from services.retriever.engine.request import UnservableRequest, serve
from services.retriever.engine.vector.ann_index import live_probes, maintain_ann_index
from services.retriever.engine.vector.tables import VectorIndex, create_index, upsert_vectors, vector_table_bytes

__all__ = [
    "STAGES",
    "CorpusStats",
    "EmbeddingReranker",
    "LegMemo",
    "Reranker",
    "SearchConfig",
    "SearchEngine",
    "SearchResult",
    "UnservableRequest",
    "VectorIndex",
    "build_reranker",
    "create_index",
    "live_probes",
    "maintain_ann_index",
    "serve",
    "upsert_vectors",
    "vector_table_bytes",
]
