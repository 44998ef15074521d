"""Test-only fault injection: a model that fails while a file exists (``EVIDENTIA_EMBEDDING_FAULT_FILE``).

The chaos tests break the running embedder's model for a bounded time without touching its process:
they create the file, wait, and remove it. The wrapper is put around the model only when the setting is
given (never in production), so the encode path of a normal embedder does not even check for the file.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from shared.embedding.base import Embedder, FloatArray, TokenIds


class InjectedModelFault(RuntimeError):
    """What the wrapped model raises while the fault file exists (stands for a sticky CUDA error)."""


class FaultInjectingEmbedder:
    """``embedder`` whose every encode raises :class:`InjectedModelFault` while ``fault_file`` exists."""

    def __init__(self, embedder: Embedder, fault_file: str) -> None:
        self._inner = embedder
        self.fault_file = fault_file
        self.name = embedder.name
        self.device = embedder.device
        self.query_prefix = embedder.query_prefix
        self.passage_prefix = embedder.passage_prefix

    def _check(self) -> None:
        if os.path.exists(self.fault_file):
            raise InjectedModelFault(f"CUDA error: injected model fault ({self.fault_file} exists)")

    @property
    def dim(self) -> int:
        return self._inner.dim

    @property
    def max_seq_length(self) -> int:
        return self._inner.max_seq_length

    def warm_up(self) -> None:
        self._inner.warm_up()

    def encode_passages(self, texts: Sequence[str], batch_size: int | None = None) -> FloatArray:
        self._check()
        return self._inner.encode_passages(texts, batch_size)

    def encode_queries(self, texts: Sequence[str], batch_size: int | None = None) -> FloatArray:
        self._check()
        return self._inner.encode_queries(texts, batch_size)

    def encode_pretokenized(self, ids: Sequence[TokenIds], batch_size: int | None = None) -> FloatArray:
        self._check()
        return self._inner.encode_pretokenized(ids, batch_size)

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        return self._inner.token_ids(texts)

    def passage_token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        return self._inner.passage_token_ids(texts)

    def count_tokens(self, text: str) -> int:
        return self._inner.count_tokens(text)

    def __getattr__(self, name: str) -> Any:  # anything else a backend offers (e.g. its provider)
        return getattr(self._inner, name)


def with_fault_injection(embedder: Embedder, fault_file: str | None) -> Embedder:
    """``embedder`` itself, or wrapped in :class:`FaultInjectingEmbedder` when a fault file is configured."""
    return embedder if not fault_file else FaultInjectingEmbedder(embedder, fault_file)
