"""The FP16 copy of bge-small: converted once, used only where its vectors stay within 1e-2 cosine of FP32.

ONNX Runtime's CPU provider runs FP16 graphs (slowly; it computes several ops in FP32), so these tests check
the conversion, the cache and the tolerance guard on CPU machines. The GPU's own FP16 arithmetic is checked
by the same guard when the model loads there; these tests say nothing about its speed.
The conversion needs the `onnx` package (the embedder-gpu and dev extras): where it is absent those tests are
skipped, and the one that asks for FP16 without it checks the refusal.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from shared.embedding import EmbedderError, clear_cache, fp16, get_embedder
from shared.embedding import onnx as onnx_backend
from shared.embedding.base import BaseEmbedder
from shared.embedding.fp16 import FP16_NAME, FP16_TOLERANCE, fp16_available, fp16_graph, worst_cosine
from shared.settings import EmbeddingSettings

needs_onnx = pytest.mark.skipif(not fp16_available(), reason="the `onnx` package (embedder-gpu extra) is absent")
TEXTS = [
    "Statins lower LDL cholesterol and cut major vascular events by about a fifth per mmol/L.",
    "Does vitamin D supplementation prevent fractures in older adults living in the community?",
    "Hand hygiene",
]


@pytest.fixture(autouse=True)
def _fresh_embedders() -> Any:
    clear_cache()
    yield
    clear_cache()


@pytest.fixture(scope="module")
def bge_copy(bge_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bge-small's folder as links in a writable place, so its FP16 copy is cached there, not in the shared one."""
    folder = tmp_path_factory.mktemp("models") / "bge-small-en-v1.5"
    (folder / "onnx").mkdir(parents=True)
    for entry in bge_folder.iterdir():
        if entry.name != "onnx":
            (folder / entry.name).symlink_to(entry)
    (folder / "onnx" / "model.onnx").symlink_to(bge_folder / "onnx" / "model.onnx")
    return folder


def _embedder(folder: Path, **kw: Any) -> BaseEmbedder:
    embedder = get_embedder(EmbeddingSettings(model=str(folder), device="cpu", **kw))
    assert isinstance(embedder, BaseEmbedder)
    embedder.warm_up()
    return embedder


def test_a_read_only_folder_without_a_copy_converts_into_the_temp_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph = tmp_path / "onnx" / "model.onnx"
    graph.parent.mkdir()
    graph.write_bytes(b"graph")
    assert fp16.fp16_path(graph) == graph.with_name(FP16_NAME)
    monkeypatch.setattr(os, "access", lambda *a: False)
    elsewhere = fp16.fp16_path(graph)
    assert elsewhere.parent.name == "evidentia-fp16" and elsewhere.parent.parent != graph.parent.parent


def test_worst_cosine() -> None:
    a = np.array([[1.0, 0.0], [0.0, 2.0]])
    assert worst_cosine(a, a) == pytest.approx(1.0)
    assert worst_cosine(a, np.array([[1.0, 1.0], [0.0, 1.0]])) == pytest.approx(2**-0.5)
    assert worst_cosine(a[:0], a[:0]) == 1.0


def test_fp16_asked_for_without_onnx_is_refused(bge_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(onnx_backend, "fp16_available", lambda: False)
    with pytest.raises(EmbedderError, match="FP16 needs the `onnx` package"):
        _embedder(bge_copy, fp16=True)


@needs_onnx
def test_fp16_copy_keeps_the_vectors_within_tolerance(bge_copy: Path) -> None:
    fp32 = _embedder(bge_copy, fp16=False)
    want = fp32.encode_passages(TEXTS)
    clear_cache()
    half = _embedder(bge_copy, fp16=True)
    assert (half.precision, fp32.precision) == ("fp16", "fp32")
    copy = bge_copy / "onnx" / FP16_NAME
    assert copy.is_file() and copy.stat().st_size < 0.6 * (bge_copy / "onnx" / "model.onnx").stat().st_size
    got = half.encode_passages(TEXTS)
    assert got.dtype == np.float32 and got.shape == want.shape
    assert worst_cosine(want, got) >= 1 - FP16_TOLERANCE
    assert np.abs(want - got).max() > 0  # the half-precision weights were really used


@needs_onnx
def test_fp16_copy_is_reused_and_refused_when_it_moves_vectors_too_far(
    bge_copy: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    graph = bge_copy / "onnx" / "model.onnx"
    first = fp16_graph(graph)
    stamp = first.stat().st_mtime_ns
    assert fp16_graph(graph) == first and first.stat().st_mtime_ns == stamp  # cached: not converted again
    monkeypatch.setattr(os, "access", lambda *a: False)  # a user who may not write there (the image's)
    assert fp16_graph(graph) == first and first.stat().st_mtime_ns == stamp  # still the copy made at build
    monkeypatch.undo()
    monkeypatch.setattr(onnx_backend, "FP16_TOLERANCE", -1.0)  # no copy can pass: the guard must keep FP32
    with caplog.at_level(logging.WARNING, logger="shared.embedding.onnx"):
        embedder = _embedder(bge_copy, fp16=True)
    assert embedder.precision == "fp32"
    assert "running FP32" in caplog.text
