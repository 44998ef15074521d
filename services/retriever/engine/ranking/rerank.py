"""Rerankers for ``hybrid+rerank``: top_k candidates -> scores, best first after sorting.

* :class:`CrossEncoderReranker`: a cross-encoder from a local folder, either a sentence-transformers
  ``CrossEncoder`` (weights + config) or an ONNX export (``model.onnx`` or ``onnx/model.onnx`` with
  ``tokenizer.json``, the layout of the ms-marco ONNX exports). No cross-encoder with weights could be
  obtained from the registries reachable here (see ``docs/benchmarks.md``), so none is configured by default.
* :class:`LlmReranker`: Claude grades every passage 0-10 in one call (listwise prompt, JSON answer).
* :class:`EmbeddingReranker`: a second bi-encoder re-scores the candidates (cosine), fused with the first
  stage's order by RRF; the offline fallback that needs no cross-encoder weights.

:func:`build_reranker` picks one from the settings: ``auto`` = cross-encoder if configured, else Claude if
an API key is set, else none (the fused order stands).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from shared.settings import Settings

log = logging.getLogger(__name__)


@runtime_checkable
class Reranker(Protocol):
    name: str

    async def rerank(self, query: str, passages: Sequence[str]) -> list[float]:
        """A relevance score per passage (higher is better), in the passages' order."""
        ...


class CrossEncoderReranker:
    """A cross-encoder over (query, passage) pairs, loaded once, run in a worker thread."""

    def __init__(self, source: str, *, max_length: int = 512, batch_size: int = 32):
        self.source = source
        self.name = f"cross-encoder:{Path(source).name or source}"
        self.max_length = max_length
        self.batch_size = batch_size
        self._lock = threading.Lock()
        self._predict: Any = None

    @staticmethod
    def onnx_graph(folder: Path) -> Path | None:
        """The ONNX graph of a model folder (``model.onnx``, ``onnx/model.onnx`` or its only ``*.onnx``), or None."""
        for candidate in (folder / "model.onnx", folder / "onnx" / "model.onnx"):
            if candidate.is_file():
                return candidate
        graphs = sorted(folder.glob("*.onnx"))
        return graphs[0] if len(graphs) == 1 else None

    def _load(self) -> Any:
        with self._lock:
            if self._predict is not None:
                return self._predict
            folder = Path(self.source).expanduser()
            graph = self.onnx_graph(folder) if folder.is_dir() else None
            has_weights = folder.is_dir() and any(
                (folder / w).is_file() for w in ("model.safetensors", "pytorch_model.bin")
            )
            if graph is not None and not has_weights:
                self._predict = self._onnx_predictor(folder, graph)
            else:
                from sentence_transformers import CrossEncoder

                model = CrossEncoder(
                    str(folder) if folder.is_dir() else self.source, max_length=self.max_length, device="cpu"
                )

                def predict(pairs: list[tuple[str, str]]) -> np.ndarray:
                    return np.asarray(model.predict(pairs, batch_size=self.batch_size), dtype=np.float32)

                self._predict = predict
            return self._predict

    def _onnx_predictor(self, folder: Path, graph: Path) -> Any:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        tok_file = folder / "tokenizer.json"
        if not tok_file.is_file():
            tok_files = sorted(folder.glob("*tokenizer*.json"))
            if not tok_files:
                raise FileNotFoundError(f"no tokenizer.json beside {graph}")
            tok_file = tok_files[0]
        tokenizer = Tokenizer.from_file(str(tok_file))
        tokenizer.enable_truncation(self.max_length)
        tokenizer.enable_padding()
        session = ort.InferenceSession(str(graph), providers=["CPUExecutionProvider"])
        inputs = {i.name for i in session.get_inputs()}

        def predict(pairs: list[tuple[str, str]]) -> np.ndarray:
            out: list[np.ndarray] = []
            for i in range(0, len(pairs), self.batch_size):
                enc = tokenizer.encode_batch(pairs[i : i + self.batch_size])
                feed = {
                    "input_ids": np.asarray([e.ids for e in enc], dtype=np.int64),
                    "attention_mask": np.asarray([e.attention_mask for e in enc], dtype=np.int64),
                    "token_type_ids": np.asarray([e.type_ids for e in enc], dtype=np.int64),
                }
                logits = session.run(None, {k: v for k, v in feed.items() if k in inputs})[0]
                out.append(np.asarray(logits, dtype=np.float32).reshape(len(enc), -1)[:, -1])
            return np.concatenate(out) if out else np.zeros(0, dtype=np.float32)

        return predict

    async def rerank(self, query: str, passages: Sequence[str]) -> list[float]:
        """One cross-encoder score per passage for ``query`` (higher: more relevant), in the passages' order."""
        if not passages:
            return []
        predict = await asyncio.to_thread(self._load)
        scores = await asyncio.to_thread(predict, [(query, p) for p in passages])
        return [float(s) for s in scores]


_LLM_PROMPT = """You rank medical literature passages for a search.

Query: {query}

Passages:
{passages}

Grade how well each passage answers or directly supports the query, 0 (irrelevant) to 10 (directly \
answers it). Reply with only a JSON array of objects {{"id": <passage number>, "score": <0-10>}}, one per \
passage."""


def parse_llm_scores(text: str, count: int) -> list[float]:
    """Scores from the model's JSON reply; passages it left out get -1. Raises ValueError on no JSON."""
    match = re.search(r"\[.*\]", text, re.DOTALL)
    if match is None:
        raise ValueError("no JSON array in the reranker's reply")
    items = json.loads(match.group(0))
    scores = [-1.0] * count
    for item in items:
        if isinstance(item, dict):
            idx, score = item.get("id"), item.get("score")
            if isinstance(idx, int) and 1 <= idx <= count and isinstance(score, int | float):
                scores[idx - 1] = float(score)
    return scores


class LlmReranker:
    """Claude grades the candidates in one call; a failed call keeps the first-stage order."""

    def __init__(self, client: Any, model: str, *, max_chars: int = 1500, max_tokens: int = 1024):
        self.client = client
        self.model = model
        self.name = f"llm:{model}"
        self.max_chars = max_chars
        self.max_tokens = max_tokens

    def prompt(self, query: str, passages: Sequence[str]) -> str:
        """The prompt that asks Claude to grade each numbered passage (cut to ``max_chars``) for ``query``."""
        blocks = "\n\n".join(f"[{i}] {p[: self.max_chars]}" for i, p in enumerate(passages, start=1))
        return _LLM_PROMPT.format(query=query, passages=blocks)

    async def rerank(self, query: str, passages: Sequence[str]) -> list[float]:
        """One relevance score per passage from Claude, in the passages' order; when Claude fails, scores that
        keep the incoming order."""
        if not passages:
            return []
        fallback = [float(len(passages) - i) / len(passages) - 1.0 for i in range(len(passages))]
        from shared.llm import create_message  # the SDK loads only where the LLM reranker is used

        try:
            msg = await create_message(
                self.client,
                service="retriever",
                step="rerank",
                model=self.model,
                max_tokens=self.max_tokens,
                messages=[{"role": "user", "content": self.prompt(query, passages)}],
            )
            text = "".join(getattr(b, "text", "") for b in msg.content)
            scores = parse_llm_scores(text, len(passages))
        except Exception:  # the search still answers, in the fused order
            log.exception("LLM rerank failed; keeping the first-stage order")
            return fallback
        # Ties (and passages the model skipped) keep the first-stage order through a tiny tie-breaker.
        return [s + 1e-6 * f for s, f in zip(scores, fallback, strict=True)]


class Encoder(Protocol):
    """What :class:`EmbeddingReranker` reads of a bi-encoder (an :class:`~shared.embedding.Embedder`, or one whose
    vectors come from a cache)."""

    @property
    def name(self) -> str: ...

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray: ...

    def encode_passages(self, texts: Sequence[str]) -> np.ndarray: ...


class EmbeddingReranker:
    """A second bi-encoder's cosine, fused by RRF with the first-stage order (``first_weight``).

    ``cache`` maps a passage text to its vector (the evaluation harness pre-computes them).
    """

    def __init__(
        self, embedder: Encoder, *, first_weight: float = 1.0, k: int = 60, cache: dict[str, np.ndarray] | None = None
    ):
        self.embedder = embedder
        self.name = f"embedding:{embedder.name}"
        self.first_weight = first_weight
        self.k = k
        self.cache = cache

    async def rerank(self, query: str, passages: Sequence[str]) -> list[float]:
        """One score per passage, in the passages' order: reciprocal-rank fusion of the incoming order (weighted
        ``first_weight``) and the order by cosine similarity of the query's and the passage's vectors."""
        if not passages:
            return []
        q = (await asyncio.to_thread(self.embedder.encode_queries, [query]))[0]
        missing = [p for p in passages if self.cache is None or p not in self.cache]
        fresh: dict[str, np.ndarray] = {}
        if missing:
            vecs = await asyncio.to_thread(self.embedder.encode_passages, missing)
            fresh = dict(zip(missing, vecs, strict=True))
        matrix = np.stack([fresh[p] if p in fresh else self.cache[p] for p in passages])  # type: ignore[index]
        cos = matrix @ q
        order = np.argsort(-cos, kind="stable")
        second_rank = np.empty(len(passages), dtype=np.int64)
        second_rank[order] = np.arange(1, len(passages) + 1)
        return [
            self.first_weight / (self.k + i + 1) + 1.0 / (self.k + int(second_rank[i])) for i in range(len(passages))
        ]


def anthropic_client(settings: Settings) -> Any:
    """An ``anthropic.AsyncAnthropic`` client from the LLM settings (API key, base URL, timeout; one retry)."""
    import anthropic

    key = settings.llm.anthropic_api_key
    return anthropic.AsyncAnthropic(
        api_key=key.get_secret_value() if key else None,
        base_url=settings.llm.anthropic_base_url,
        timeout=settings.llm.timeout_s,
        max_retries=1,
    )


_CACHE: dict[tuple[str, str], Reranker] = {}


def build_reranker(settings: Settings, kind: str | None = None) -> Reranker | None:
    """The reranker ``kind`` (default: the setting) names, or None (keep the fused order)."""
    r = settings.retrieval
    kind = kind or r.reranker
    if kind == "none":
        return None
    if kind in ("auto", "cross-encoder") and r.cross_encoder:
        key = ("cross-encoder", r.cross_encoder)
        if key not in _CACHE:
            _CACHE[key] = CrossEncoderReranker(r.cross_encoder)
        return _CACHE[key]
    if kind == "cross-encoder":
        raise ValueError("no cross-encoder is configured (EVIDENTIA_RETRIEVAL_CROSS_ENCODER)")
    if kind in ("auto", "llm") and settings.llm.anthropic_api_key is not None:
        model = r.rerank_llm_model or settings.llm.model
        key = ("llm", model)
        if key not in _CACHE:
            _CACHE[key] = LlmReranker(anthropic_client(settings), model, max_chars=r.rerank_max_chars)
        return _CACHE[key]
    if kind == "llm":
        raise ValueError("the LLM reranker needs an Anthropic API key (ANTHROPIC_API_KEY)")
    return None
