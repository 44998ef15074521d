"""get_embedder: resolution of the model setting, the per-process cache, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.embedding import EmbedderError, clear_cache, get_embedder, resolve
from shared.embedding.base import BGE_QUERY_PREFIX, E5_PASSAGE_PREFIX, E5_QUERY_PREFIX
from shared.embedding.factory import default_prefixes, packaged_minilm_folder, resolve_device
from shared.embedding.onnx import OnnxEmbedder
from shared.embedding.sentence_transformers import SentenceTransformerEmbedder
from shared.settings import EmbeddingSettings


@pytest.mark.usefixtures("fresh_cache")
def test_one_instance_per_setting() -> None:
    settings = EmbeddingSettings(model="all-MiniLM-L6-v2", device="cpu")
    first = get_embedder(settings)
    assert get_embedder(EmbeddingSettings(model="all-MiniLM-L6-v2", device="cpu")) is first
    other = get_embedder(EmbeddingSettings(model="all-MiniLM-L6-v2", device="cpu", batch_size=8))
    assert other is not first
    clear_cache()
    assert get_embedder(settings) is not first


def test_aliases_resolve_to_the_packaged_model() -> None:
    for name in ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"):
        backend, config = resolve(EmbeddingSettings(model=name, device="cpu"))
        assert backend is SentenceTransformerEmbedder
        assert Path(config.source) == packaged_minilm_folder()
        assert config.name == "sentence-transformers/all-MiniLM-L6-v2"
        assert (config.dim, config.query_prefix) == (384, "")


def test_local_folder_path() -> None:
    folder = str(packaged_minilm_folder())
    backend, config = resolve(EmbeddingSettings(model=folder, device="cpu", query_prefix="q: "))
    assert backend is SentenceTransformerEmbedder
    assert config.source == str(Path(folder).resolve())
    assert config.query_prefix == "q: "


def test_device_auto_is_cpu_without_cuda() -> None:
    import torch

    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cuda:1") == "cuda:1"
    _, config = resolve(EmbeddingSettings(model="all-MiniLM-L6-v2", device="cpu"))
    assert config.fp16 is False


def test_missing_bge_folder_says_how_to_fetch(tmp_path: Path) -> None:
    with pytest.raises(EmbedderError, match=r"evidentia models fetch bge-small-en-v1\.5"):
        get_embedder(EmbeddingSettings(model="BAAI/bge-small-en-v1.5", models_dir=str(tmp_path)))


def test_fetched_folder_resolves_to_onnx(tmp_path: Path) -> None:
    folder = tmp_path / "bge-small-en-v1.5"
    (folder / "onnx").mkdir(parents=True)
    (folder / "onnx" / "model.onnx").write_bytes(b"")
    (folder / "modules.json").write_text("[]")
    backend, config = resolve(EmbeddingSettings(model="bge-small-en-v1.5", device="cpu", models_dir=str(tmp_path)))
    assert backend is OnnxEmbedder
    assert (config.name, config.pooling, config.max_seq_length) == ("BAAI/bge-small-en-v1.5", "cls", 512)
    assert config.query_prefix == BGE_QUERY_PREFIX


def test_unknown_hub_name_fails_clearly_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    embedder = get_embedder(EmbeddingSettings(model="FremyCompany/BioLORD-2023", device="cpu"))
    assert embedder.name == "FremyCompany/BioLORD-2023"
    with pytest.raises(EmbedderError, match="FremyCompany/BioLORD-2023") as info:
        embedder.warm_up()
    assert "EVIDENTIA_EMBEDDING_MODEL" in str(info.value)


def test_default_prefixes() -> None:
    assert default_prefixes("BAAI/bge-base-en-v1.5") == (BGE_QUERY_PREFIX, "")
    assert default_prefixes("intfloat/e5-small-v2") == (E5_QUERY_PREFIX, E5_PASSAGE_PREFIX)
    assert default_prefixes("FremyCompany/BioLORD-2023") == ("", "")
    assert default_prefixes("sentence-transformers/all-MiniLM-L6-v2") == ("", "")


@pytest.mark.usefixtures("fresh_cache")
def test_onnx_runtime_threads_sleep_between_operations_unless_spinning_is_asked_for(bge_folder: Path) -> None:
    """A query encoder shares its cores with the search it serves: its threads must not spin-wait (the
    default), which cost a hybrid search ~15 ms of CPU under load; ``spin_wait`` gives an embedder its
    cores to itself."""

    def spinning(**options: object) -> str:
        settings = EmbeddingSettings(model="bge-small-en-v1.5", device="cpu", models_dir=str(bge_folder.parent))
        embedder = get_embedder(settings.model_copy(update=options))
        assert isinstance(embedder, OnnxEmbedder)
        embedder.warm_up()
        entry: str = embedder._session.get_session_options().get_session_config_entry("session.intra_op.allow_spinning")
        return entry

    assert spinning() == "0"
    assert spinning(spin_wait=True) == "1"
