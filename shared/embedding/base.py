"""The embedder protocol every backend implements, and the pieces the backends share.

An embedder is built cheaply (it only records what to load); the model itself is loaded by
:meth:`Embedder.warm_up` (Haystack style), which every encoding method calls on first use. All
vectors come back as float32 numpy arrays of shape ``(n, dim)``, L2-normalised, so a dot product is
the cosine similarity.

Token ids: :meth:`Embedder.token_ids` returns what the model is fed (special tokens included,
truncated to ``max_seq_length``), so ids produced once (e.g. by the parser, shipped in
``chunks.created``) can go straight to :meth:`Embedder.encode_pretokenized`, which skips the
tokeniser in the hot loop. :meth:`Embedder.count_tokens` counts a text's own tokens (no special
tokens, no truncation), which is what a chunker needs.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

Pooling = Literal["cls", "mean"]
FloatArray = npt.NDArray[np.float32]
TokenIds = Sequence[int] | npt.NDArray[np.integer[Any]]
"""One text's model input ids: a list, or an integer array (as unpacked from ``ChunkCreated.token_ids_u32``)."""

BGE_QUERY_PREFIX = "Represent this sentence for searching relevant passages: "
E5_QUERY_PREFIX = "query: "
E5_PASSAGE_PREFIX = "passage: "


class EmbedderError(RuntimeError):
    """An embedding model could not be found or loaded; the message says what to do."""


@runtime_checkable
class Embedder(Protocol):
    """What the embedder service, the retriever and the eval harness need from a model."""

    name: str
    """Canonical model id recorded in the index, e.g. ``sentence-transformers/all-MiniLM-L6-v2``."""
    device: str
    """``cpu``, ``cuda``, ``cuda:1``..."""
    query_prefix: str
    passage_prefix: str

    @property
    def dim(self) -> int: ...

    @property
    def max_seq_length(self) -> int: ...

    def warm_up(self) -> None:
        """Load the model (idempotent, thread-safe)."""

    def encode_passages(self, texts: Sequence[str], batch_size: int | None = None) -> FloatArray:
        """Embed passages (with the model's passage prefix, if any)."""
        ...

    def encode_queries(self, texts: Sequence[str], batch_size: int | None = None) -> FloatArray:
        """Embed queries (with the query prefix, if any)."""
        ...

    def encode_pretokenized(self, ids: Sequence[TokenIds], batch_size: int | None = None) -> FloatArray:
        """Embed texts already turned into model input ids by :meth:`token_ids`."""
        ...

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Model input ids of each text: special tokens included, truncated to ``max_seq_length``."""
        ...

    def passage_token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """:meth:`token_ids` of passages with the passage prefix (e5) applied: what to ship for passages."""
        ...

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` alone (no special tokens, no truncation)."""
        ...


@dataclass(frozen=True)
class EmbedderConfig:
    """Everything a backend needs to know; resolved by :mod:`shared.embedding.factory`."""

    name: str
    source: str
    """A local folder, or a hub name for the torch backend."""
    device: str = "cpu"
    """``cpu``, ``cuda``, ``cuda:N``; ``auto`` for the ONNX backend, which settles it when the model loads."""
    device_required: bool = False
    """The device was asked for (not ``auto``): a GPU that cannot be used is an error, not a CPU fallback."""
    fp16: bool | None = False
    """Half precision; ``None``: on when the model runs on CUDA (the ONNX backend, which settles it at load)."""
    batch_size: int = 64
    threads: int | None = None
    spin_wait: bool = False
    """ONNX Runtime's CPU threads spin between operations instead of sleeping (``EmbeddingSettings.spin_wait``)."""
    query_prefix: str = ""
    passage_prefix: str = ""
    dim: int | None = None
    max_seq_length: int | None = None
    pooling: Pooling | None = None


def runtime_of(embedder: Embedder) -> dict[str, str]:
    """What ``/health``, the start log and the device metric say of a loaded embedder: model, device, provider
    (``CUDAExecutionProvider``, ``CPUExecutionProvider``, ``torch``) and precision (``fp32``, ``fp16``).

    Read with defaults: an :class:`Embedder` need not be a :class:`BaseEmbedder` (a benchmark's stand-in)."""
    return {
        "model": embedder.name,
        "device": embedder.device,
        "provider": str(getattr(embedder, "provider", "") or "unknown"),
        "precision": str(getattr(embedder, "precision", "") or "unknown"),
    }


def l2_normalise(x: npt.NDArray[np.floating]) -> FloatArray:
    """Rows of ``x`` scaled to unit length (zero rows stay zero), as float32."""
    x32 = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x32, axis=1, keepdims=True)
    out: FloatArray = x32 / np.maximum(norms, 1e-12)
    return out


def length_sorted_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices grouped into batches of similar length (longest first) to cut padding."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def truncate_ids(ids: TokenIds, limit: int) -> TokenIds:
    """Ids cut to ``limit``, keeping the last (the end-of-sequence token), as the tokenizer truncates."""
    if len(ids) <= limit:
        return ids
    if isinstance(ids, np.ndarray):
        return np.concatenate([ids[: limit - 1], ids[-1:]])
    return [*ids[: limit - 1], ids[-1]]


def pad_ids(batch: Sequence[TokenIds], pad_id: int = 0) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Right-pad ids (lists or integer arrays) to the longest in the batch: ``(input_ids, attention_mask)``, int64."""
    lengths = np.fromiter((len(seq) for seq in batch), dtype=np.int64, count=len(batch))
    width = int(lengths.max()) if len(batch) else 0
    ids = np.full((len(batch), width), pad_id, dtype=np.int64)
    keep = np.arange(width) < lengths[:, None]
    if len(batch) and width:
        # One concatenation and one masked scatter (row-major, so row by row): no per-row numpy call.
        ids[keep] = np.concatenate([np.asarray(seq, dtype=np.int64) for seq in batch])
    return ids, keep.astype(np.int64)


class BaseEmbedder(ABC):
    """Shared behaviour: lazy thread-safe loading, prefixes, empty inputs."""

    def __init__(self, config: EmbedderConfig) -> None:
        self.config = config
        self.name = config.name
        self.device = config.device
        self.query_prefix = config.query_prefix
        self.passage_prefix = config.passage_prefix
        self.batch_size = config.batch_size
        self._lock = threading.Lock()
        self._loaded = False
        self._dim = config.dim
        self._max_seq_length = config.max_seq_length
        self.provider = ""
        """What runs the model, set by the backend at load: an ONNX Runtime execution provider, or ``torch``."""
        self.precision = "fp32"

    def __repr__(self) -> str:
        source = self.config.source
        return f"{type(self).__name__}(name={self.name!r}, device={self.device!r}, source={source!r})"

    def warm_up(self) -> None:
        if self._loaded:
            return
        with self._lock:
            if not self._loaded:
                self._load()
                self._loaded = True
                from shared.metrics import EMBED_DEVICE

                EMBED_DEVICE.labels(**runtime_of(self)).set(1)

    @abstractmethod
    def _load(self) -> None:
        """Load the model; set ``self._dim`` and ``self._max_seq_length``."""

    @property
    def dim(self) -> int:
        if self._dim is None:
            self.warm_up()
        assert self._dim is not None
        return self._dim

    @property
    def max_seq_length(self) -> int:
        if self._max_seq_length is None:
            self.warm_up()
        assert self._max_seq_length is not None
        return self._max_seq_length

    def _empty(self) -> FloatArray:
        return np.zeros((0, self.dim), dtype=np.float32)

    def encode_passages(self, texts: Sequence[str], batch_size: int | None = None) -> FloatArray:
        if not texts:
            return self._empty()
        self.warm_up()
        if self.passage_prefix:
            texts = [self.passage_prefix + t for t in texts]
        return self._encode(list(texts), batch_size or self.batch_size)

    def encode_queries(self, texts: Sequence[str], batch_size: int | None = None) -> FloatArray:
        if not texts:
            return self._empty()
        self.warm_up()
        return self._encode([self.query_prefix + t for t in texts], batch_size or self.batch_size)

    def encode_pretokenized(self, ids: Sequence[TokenIds], batch_size: int | None = None) -> FloatArray:
        if not ids:
            return self._empty()
        self.warm_up()
        return self._encode_ids(ids, batch_size or self.batch_size)

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        if not texts:
            return []
        self.warm_up()
        return self._token_ids(list(texts))

    def passage_token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """:meth:`token_ids` of passages, with the passage prefix (e5) applied."""
        if self.passage_prefix:
            texts = [self.passage_prefix + t for t in texts]
        return self.token_ids(texts)

    def count_tokens(self, text: str) -> int:
        self.warm_up()
        return self._count_tokens(text)

    @abstractmethod
    def _encode(self, texts: list[str], batch_size: int) -> FloatArray: ...

    @abstractmethod
    def _encode_ids(self, ids: Sequence[TokenIds], batch_size: int) -> FloatArray: ...

    @abstractmethod
    def _token_ids(self, texts: list[str]) -> list[list[int]]: ...

    @abstractmethod
    def _count_tokens(self, text: str) -> int: ...
