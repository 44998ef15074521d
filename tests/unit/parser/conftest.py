"""Shared fixtures of the parser tests: the real MiniLM tokenizer and chunker (loaded once)."""

from __future__ import annotations

import pytest

from services.parser.chunking import Chunker
from services.parser.tokens import HfTokenizer, get_tokenizer


@pytest.fixture(scope="session")
def tokenizer() -> HfTokenizer:
    return get_tokenizer("all-MiniLM-L6-v2")


@pytest.fixture(scope="session")
def chunker(tokenizer: HfTokenizer) -> Chunker:
    return Chunker(tokenizer)
