"""The embedder protocol on the offline default model (all-MiniLM-L6-v2) and on bge-small-en-v1.5."""

from __future__ import annotations

import numpy as np
import pytest

from shared.embedding import Embedder
from shared.embedding.base import BGE_QUERY_PREFIX, BaseEmbedder, length_sorted_batches, pad_ids
from shared.embedding.onnx import OnnxEmbedder
from shared.embedding.sentence_transformers import SentenceTransformerEmbedder

TEXTS = [
    "Aspirin reduces the risk of myocardial infarction in men.",
    "Low-dose acetylsalicylic acid lowers the incidence of heart attacks.",
    "The stock market fell sharply on Tuesday.",
    "Metformin is the first-line therapy for type 2 diabetes. " * 40,  # longer than the 256-token cap
    "Short.",
    "Statins lower LDL cholesterol and cardiovascular events in primary prevention.",
]


def test_default_model_loads_offline(minilm: BaseEmbedder) -> None:
    assert isinstance(minilm, Embedder)
    assert isinstance(minilm, SentenceTransformerEmbedder)
    assert minilm.name == "sentence-transformers/all-MiniLM-L6-v2"
    assert minilm.dim == 384
    assert minilm.max_seq_length == 256
    assert minilm.device == "cpu"
    assert minilm.query_prefix == ""


def test_vectors_are_normalised_float32(minilm: BaseEmbedder) -> None:
    vectors = minilm.encode_passages(TEXTS, batch_size=4)
    assert vectors.shape == (len(TEXTS), 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    # related sentences are closer than unrelated ones
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2


def test_identical_text_identical_vector(minilm: BaseEmbedder) -> None:
    text = TEXTS[0]
    together = minilm.encode_passages([text, TEXTS[3], text], batch_size=2)
    alone = minilm.encode_passages([text])
    np.testing.assert_allclose(together[0], together[2], atol=1e-6)
    np.testing.assert_allclose(together[0], alone[0], atol=1e-5)


def test_empty_input(minilm: BaseEmbedder) -> None:
    assert minilm.encode_passages([]).shape == (0, 384)
    assert minilm.encode_queries([]).shape == (0, 384)
    assert minilm.encode_pretokenized([]).shape == (0, 384)
    assert minilm.token_ids([]) == []


def test_pretokenized_matches_encode(minilm: BaseEmbedder) -> None:
    reference = minilm.encode_passages(TEXTS, batch_size=64)
    ids = minilm.token_ids(TEXTS)
    for batch_size in (1, 2, 64):
        fast = minilm.encode_pretokenized(ids, batch_size=batch_size)
        np.testing.assert_allclose(fast, reference, atol=1e-4)


def test_token_ids_and_counts(minilm: BaseEmbedder) -> None:
    ids = minilm.token_ids(TEXTS)
    assert max(len(seq) for seq in ids) == 256  # truncated to the model's cap, special tokens included
    for text, seq in zip(TEXTS, ids, strict=True):
        assert len(seq) == min(minilm.count_tokens(text) + 2, 256)
    assert minilm.count_tokens(TEXTS[3]) > 256  # counting does not truncate


def test_minilm_has_no_query_prefix(minilm: BaseEmbedder) -> None:
    np.testing.assert_allclose(minilm.encode_queries(TEXTS[:2]), minilm.encode_passages(TEXTS[:2]), atol=1e-5)


def test_batching_helpers() -> None:
    assert length_sorted_batches([3, 1, 2, 5], 2) == [[3, 0], [2, 1]]
    ids, mask = pad_ids([[101, 7, 102], [101, 102]])
    assert ids.tolist() == [[101, 7, 102], [101, 102, 0]]
    assert mask.tolist() == [[1, 1, 1], [1, 1, 0]]


@pytest.mark.slow
def test_bge_small(bge: BaseEmbedder) -> None:
    assert isinstance(bge, OnnxEmbedder)
    assert bge.name == "BAAI/bge-small-en-v1.5"
    assert (bge.dim, bge.max_seq_length) == (384, 512)
    assert bge.query_prefix == BGE_QUERY_PREFIX
    vectors = bge.encode_passages(TEXTS)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors[0] @ vectors[1] > 0.75 > vectors[0] @ vectors[2]
    # the query prefix is applied to queries, and only to them
    query = "Does aspirin prevent heart attacks?"
    q = bge.encode_queries([query])
    np.testing.assert_allclose(q, bge.encode_passages([BGE_QUERY_PREFIX + query]), atol=1e-5)
    assert not np.allclose(q, bge.encode_passages([query]), atol=1e-3)
    assert int(np.argmax(vectors @ q[0])) in (0, 1)
    np.testing.assert_allclose(bge.encode_pretokenized(bge.token_ids(TEXTS), batch_size=2), vectors, atol=1e-4)
