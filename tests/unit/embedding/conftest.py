"""Fixtures of the embedder tests: the packaged MiniLM embedder and a fetched bge-small-en-v1.5."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.embedding import clear_cache, get_embedder
from shared.embedding.base import BaseEmbedder
from shared.embedding.fetch import FetchError, fetch_model, is_fetched, known_model, model_folder
from shared.settings import EmbeddingSettings


@pytest.fixture(scope="session")
def minilm() -> BaseEmbedder:
    """The offline default, loaded once for the session (CPU)."""
    embedder = get_embedder(EmbeddingSettings(model="all-MiniLM-L6-v2", device="cpu"))
    assert isinstance(embedder, BaseEmbedder)
    embedder.warm_up()
    return embedder


@pytest.fixture(scope="session")
def bge_folder() -> Path:
    """bge-small-en-v1.5's folder, fetched with Maven (jar cached in .cache/m2) if needed; else skip."""
    model = known_model("bge-small-en-v1.5")
    assert model is not None
    models_dir = EmbeddingSettings().models_dir
    folder = model_folder(model, models_dir)
    if is_fetched(folder):
        return folder
    if shutil.which("mvn") is None:
        pytest.skip(
            "bge-small-en-v1.5 is not fetched and Maven is absent: "
            "run `evidentia models fetch bge-small-en-v1.5`"
        )
    try:
        return fetch_model("bge-small-en-v1.5", models_dir=models_dir)
    except FetchError as exc:
        pytest.skip(f"bge-small-en-v1.5 could not be fetched from Maven Central: {exc}")


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
