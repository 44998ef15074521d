"""bench/ingest.py feeds both paths the same documents: reproducible by index, and one document whether it
travels as a JSON line (``evidentia ingest --jsonl``) or as PubMed XML (the fake E-utilities)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from services.fetcher.bulk import parse_document_line
from services.parser.pubmed import parse_record

ROOT = Path(__file__).resolve().parents[3]


def _ingest() -> ModuleType:
    sys.path.insert(0, str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location("ingest_bench", ROOT / "bench" / "ingest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["ingest_bench"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_documents_depend_on_their_index_alone_and_reuse_real_sentences() -> None:
    bench = _ingest()
    source = bench.load_source(None)  # the bundled PubMedQA sample
    small, large = bench.synthesise(source, 5), bench.synthesise(source, 40)
    assert small == large[:5]  # a run of N documents is the first N of any larger one
    assert bench.synthesise(source, 5, seed=35) != small
    real = {" ".join(s.split()) for a in source.abstracts for s in a.sentences}
    titles = {" ".join(a.title.split()) for a in source.abstracts}
    for doc in large:
        assert doc.title in titles
        assert set(doc.sentences) <= real
    assert len({d.pmid for d in large}) == 40
    assert len({d.abstract for d in large}) == 40  # recombined, not copies of one another


def test_a_document_is_the_same_through_the_jsonl_path_and_the_eutils_path() -> None:
    bench = _ingest()
    for doc in bench.synthesise(bench.load_source(None), 12):
        from_jsonl = parse_document_line(doc.json_line())
        from_xml = parse_record(doc.pubmed_xml())
        assert from_jsonl.document_id == from_xml.document_id == f"pubmed:{doc.pmid}"
        assert from_jsonl.title == from_xml.title == doc.title
        assert from_jsonl.abstract == from_xml.abstract == doc.abstract
        assert from_jsonl.year == from_xml.year == doc.year
        assert [m.descriptor for m in from_jsonl.mesh] == [m.descriptor for m in from_xml.mesh] == doc.mesh
