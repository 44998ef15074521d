"""Model input ids of passages without loading the model: what the parser ships in ``chunks.created``.

:func:`passage_tokenizer` reads the configured model's ``tokenizer.json`` (its local folder: the
packaged MiniLM, a fetched ONNX folder, or any sentence-transformers folder) and reproduces
:meth:`Embedder.passage_token_ids`: the passage prefix (e5), special tokens, truncation to the
model's ``max_seq_length``, no padding. The ids are labelled with the model's canonical name
(``ChunkCreated.token_model``) so an embedder running another model ignores them and tokenises the
text itself. A hub name (no local folder) gives ``None``: the embedder tokenises those.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shared.embedding.base import EmbedderError

if TYPE_CHECKING:
    from shared.settings import EmbeddingSettings

log = logging.getLogger(__name__)


class PassageTokenizer:
    """``tok(texts) -> ids`` for the passages of one model (thread-safe: the Rust tokenizer is)."""

    def __init__(self, model: str, tokenizer: Any, max_seq_length: int, prefix: str = "") -> None:
        self.model = model
        self.max_seq_length = max_seq_length
        self.prefix = prefix
        self._tok = tokenizer

    def __call__(self, texts: Sequence[str]) -> list[list[int]]:
        if not texts:
            return []
        if self.prefix:
            texts = [self.prefix + t for t in texts]
        return [list(enc.ids) for enc in self._tok.encode_batch(list(texts), add_special_tokens=True)]

    def __repr__(self) -> str:
        return f"PassageTokenizer(model={self.model!r}, max_seq_length={self.max_seq_length})"


def passage_tokenizer(settings: EmbeddingSettings) -> PassageTokenizer | None:
    """The passage tokenizer of ``settings.model``, or ``None`` when it has no local ``tokenizer.json``."""
    from tokenizers import Tokenizer

    from shared.embedding.factory import resolve
    from shared.embedding.onnx import read_max_seq_length

    try:
        _, config = resolve(settings)
    except EmbedderError as exc:
        log.warning("no passage tokenizer for %s: %s", settings.model, exc)
        return None
    folder = Path(config.source)
    path = folder / "tokenizer.json"
    if not path.is_file():
        return None
    max_len = config.max_seq_length or read_max_seq_length(folder)
    tok = Tokenizer.from_file(str(path))
    tok.no_padding()
    tok.enable_truncation(max_length=max_len)
    return PassageTokenizer(config.name, tok, max_len, config.passage_prefix)
