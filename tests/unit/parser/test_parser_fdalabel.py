"""The parser on a drug label as the fetcher sends it (a document-json event): chunked section by section."""

from __future__ import annotations

from services.parser.chunking import Chunker
from services.parser.handlers import parse_event
from shared.events import DocumentFetched
from shared.sources.fdalabel_document import label_document
from tests.fakes.openfda_server import load


def test_every_fixture_label_is_chunked_by_section(chunker: Chunker) -> None:
    for label in load("labels.json"):
        doc = label_document(label)
        event = DocumentFetched(
            document_id=doc.document_id,
            source=doc.source,
            source_id=doc.source_id,
            format="document-json",
            document=doc,
        )
        [parsed] = parse_event(event, chunker)
        titles = {s.title for s in parsed.sections}
        assert parsed.chunks and {c.section for c in parsed.chunks} == titles  # every section has its chunks
        for chunk in parsed.chunks:  # and no chunk runs across two sections
            sec = next(s for s in parsed.sections if s.title == chunk.section)
            assert sec.char_start <= chunk.char_start < chunk.char_end <= sec.char_end
        assert parsed.drug_label == doc.drug_label  # the label's identity survives parsing
