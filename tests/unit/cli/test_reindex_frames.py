"""``evidentia reindex`` publishes ``ChunkCreated`` version 2, the binary frame the parser writes, which the
reindex embedder reads without pydantic."""

from __future__ import annotations

from cli.reindex import reindex_frames
from shared.chunk_wire import is_binary, read_chunk, to_event

ROWS = [
    {"chunk_id": "pmid:1:0", "document_id": "pmid:1", "ordinal": 0, "embedding_text": "Aspirin ß", "token_count": 3},
    {"chunk_id": "pmid:2:0", "document_id": "pmid:2", "ordinal": 0, "embedding_text": "Statins", "token_count": 2},
]


def test_each_chunk_is_framed_for_its_target_model_with_its_token_ids() -> None:
    frames = reindex_frames(ROWS, [[101, 7, 102], [101, 102]], "bge-small-en-v1.5")
    assert [key for _, key in frames] == ["pmid:1", "pmid:2"]
    assert all(is_binary(body) for body, _ in frames)
    chunk = read_chunk(frames[0][0])
    ids = chunk.input_ids()
    assert ids is not None and ids.tolist() == [101, 7, 102]
    assert (chunk.chunk_id, chunk.document_id, chunk.text) == ("pmid:1:0", "pmid:1", "Aspirin ß")
    assert (chunk.target_model, chunk.token_model) == ("bge-small-en-v1.5", "bge-small-en-v1.5")
    event = to_event(frames[1][0])
    assert (event.schema_version, event.token_count, event.target_model) == (2, 2, "bge-small-en-v1.5")


def test_without_a_tokenizer_the_embedder_tokenizes() -> None:
    body, _ = reindex_frames(ROWS[:1], None, "some/model")[0]
    chunk = read_chunk(body)
    assert chunk.input_ids() is None and chunk.token_model is None
    assert (chunk.target_model, chunk.text) == ("some/model", "Aspirin ß")
