"""The torch backend for a fetched ONNX model: the graph's weights exported as a PyTorch folder, checked.

The export is what runs the default model on a GPU where only PyTorch has CUDA (the machine's CUDA is newer than
onnxruntime-gpu's). These tests run it on the CPU against the real bge-small graph: the architecture read off
the graph, vectors equal to ONNX Runtime's, the factory's choice, the refusal of a graph that is not a BERT
export or of an export that does not reproduce its graph, and the message when ``onnx`` is missing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from shared.embedding import EmbedderError, get_embedder, resolve
from shared.embedding import onnx_to_torch as export
from shared.embedding.base import BGE_QUERY_PREFIX, BaseEmbedder, runtime_of
from shared.embedding.fp16 import PROBE_TEXTS
from shared.embedding.onnx import OnnxEmbedder
from shared.embedding.sentence_transformers import SentenceTransformerEmbedder
from shared.settings import EmbeddingSettings

pytestmark = [
    pytest.mark.skipif(not export.onnx_available(), reason="the `onnx` package is absent"),
    pytest.mark.usefixtures("fresh_cache"),
]
TEXTS = [PROBE_TEXTS[0], PROBE_TEXTS[4], PROBE_TEXTS[5]]  # a statement, a question, one word


@pytest.fixture(scope="module")
def models_dir(bge_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A models folder whose bge-small links to the fetched one, so the export is written here."""
    root = tmp_path_factory.mktemp("models")
    folder = root / "bge-small-en-v1.5"
    (folder / "onnx").mkdir(parents=True)
    for entry in bge_folder.iterdir():
        if entry.name not in ("onnx", export.TORCH_FOLDER):
            (folder / entry.name).symlink_to(entry)
    (folder / "onnx" / "model.onnx").symlink_to(bge_folder / "onnx" / "model.onnx")
    return root


@pytest.fixture(scope="module")
def exported(models_dir: Path) -> Path:
    return export.torch_folder(models_dir / "bge-small-en-v1.5")


def test_the_architecture_is_read_off_the_graph(exported: Path) -> None:
    import json

    config = json.loads((exported / "config.json").read_text())
    assert {k: config[k] for k in ("num_hidden_layers", "num_attention_heads", "hidden_size", "intermediate_size")} == {
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "hidden_size": 384,
        "intermediate_size": 1536,
    }
    assert config["vocab_size"] == 30522 and config["max_position_embeddings"] == 512
    assert config["layer_norm_eps"] == pytest.approx(1e-12)
    assert (exported / "tokenizer.json").is_file() and (exported / "1_Pooling" / "config.json").is_file()


def test_the_factory_runs_the_catalogue_model_on_torch_with_the_same_vectors(models_dir: Path, exported: Path) -> None:
    settings = EmbeddingSettings(model="bge-small-en-v1.5", models_dir=str(models_dir), device="cpu", backend="torch")
    backend, config = resolve(settings)
    assert backend is SentenceTransformerEmbedder
    assert Path(config.source) == exported
    assert (config.name, config.query_prefix, config.dim) == ("BAAI/bge-small-en-v1.5", BGE_QUERY_PREFIX, 384)
    on_torch = get_embedder(settings)
    assert isinstance(on_torch, BaseEmbedder)
    on_onnx = get_embedder(EmbeddingSettings(model="bge-small-en-v1.5", models_dir=str(models_dir), device="cpu"))
    assert isinstance(on_onnx, OnnxEmbedder)
    on_torch.warm_up()
    on_onnx.warm_up()
    assert runtime_of(on_torch)["provider"] == "torch" and runtime_of(on_onnx)["provider"] == "CPUExecutionProvider"
    for encode in ("encode_passages", "encode_queries"):
        a, b = getattr(on_torch, encode)(TEXTS), getattr(on_onnx, encode)(TEXTS)
        assert a.shape == b.shape == (len(TEXTS), 384)
        assert float((a * b).sum(axis=1).min()) > 1 - 1e-5
    ids = on_torch.passage_token_ids(TEXTS)
    assert ids == on_onnx.passage_token_ids(TEXTS)
    assert float((on_torch.encode_pretokenized(ids) * on_onnx.encode_passages(TEXTS)).sum(axis=1).min()) > 1 - 1e-5


def test_the_export_is_made_once(models_dir: Path, exported: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def again(*_: Any, **__: Any) -> Path:
        raise AssertionError("exported a second time")

    monkeypatch.setattr(export, "export_torch_folder", again)
    assert export.torch_folder(models_dir / "bge-small-en-v1.5") == exported


def test_an_export_that_does_not_reproduce_the_graph_is_refused(
    models_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = export._graph_vectors

    def shifted(folder: Path, texts: list[str]) -> np.ndarray:
        vectors = np.roll(real(folder, texts), 1, axis=1)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    monkeypatch.setattr(export, "_graph_vectors", shifted)
    out = tmp_path / "torch"
    with pytest.raises(EmbedderError, match="does not reproduce the graph"):
        export.export_torch_folder(models_dir / "bge-small-en-v1.5", out)
    assert not out.exists() and not list(tmp_path.glob(".torch-*"))


def test_a_graph_that_is_not_a_bert_export_is_refused(tmp_path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.ones((4, 4), dtype=np.float32), "w")
    shift = numpy_helper.from_array(np.zeros(4, dtype=np.float32), "shift")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Add", ["y", "shift"], ["z"])],
        "not_bert",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4])],
        initializer=[weight, shift],
    )
    path = tmp_path / "onnx" / "model.onnx"
    path.parent.mkdir()
    onnx.save(helper.make_model(graph), str(path))
    with pytest.raises(EmbedderError, match="not a BERT export"):
        export.bert_weights(path)


def test_without_the_onnx_package_the_error_says_what_to_install(
    models_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(export, "onnx_available", lambda: False)
    with pytest.raises(EmbedderError, match="embedder-gpu"):
        export.export_torch_folder(models_dir / "bge-small-en-v1.5", tmp_path / "torch")


def test_a_gpu_this_torch_cannot_use_is_refused_with_the_reason(models_dir: Path, exported: Path) -> None:
    import torch

    from shared.embedding.providers import DeviceUnavailable

    if torch.cuda.is_available():
        pytest.skip("this machine's torch has a GPU")
    settings = EmbeddingSettings(model="bge-small-en-v1.5", models_dir=str(models_dir), device="cuda", backend="torch")
    with pytest.raises(DeviceUnavailable, match=r"EVIDENTIA_EMBEDDING_DEVICE=cuda asks for a GPU, but this PyTorch"):
        get_embedder(settings).warm_up()
