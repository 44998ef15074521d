"""Fixtures of the embedder tests: the packaged MiniLM embedder and a fetched bge-small-en-v1.5."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.embedding import clear_cache, get_embedder
from shared.embedding.base import BaseEmbedder
from shared.settings import EmbeddingSettings


@pytest.fixture(scope="session")
def minilm() -> BaseEmbedder:
    """The offline default, loaded once for the session (CPU)."""
    embedder = get_embedder(EmbeddingSettings(model="all-MiniLM-L6-v2", device="cpu"))
    assert isinstance(embedder, BaseEmbedder)
    embedder.warm_up()
    return embedder


@pytest.fixture(scope="session")
def bge(bge_folder: Path) -> BaseEmbedder:
    embedder = get_embedder(
        EmbeddingSettings(model="bge-small-en-v1.5", device="cpu", models_dir=str(bge_folder.parent))
    )
    assert isinstance(embedder, BaseEmbedder)
    embedder.warm_up()
    return embedder


@pytest.fixture
def fresh_cache() -> Iterator[None]:
    """Tests of the factory's cache start and end with an empty one."""
    clear_cache()
    yield
    clear_cache()
