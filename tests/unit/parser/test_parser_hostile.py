"""Hostile and broken input: each fails with a readable ValueError; `evidentia parse` exits non-zero."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cli.main import main
from services.parser.chunking import Chunker
from services.parser.core import ParseError, parse_content, parse_file
from services.parser.detect import UnknownFormatError, detect_format
from shared.xmlsafe import MalformedXmlError, UnsafeXmlError, iter_pubmed_records, parse_xml

ROOT = Path(__file__).resolve().parents[3]
HOSTILE = ROOT / "tests" / "fixtures" / "hostile"

CASES = [
    ("xxe.xml", UnsafeXmlError, "internal DTD"),
    ("xxe-jats.nxml", UnsafeXmlError, "internal DTD"),
    ("billion-laughs.xml", UnsafeXmlError, "entity expansion"),
    ("truncated-pubmed.xml", MalformedXmlError, "Premature end of data"),
    ("truncated-jats.nxml", MalformedXmlError, "not well-formed XML"),
    ("truncated.xml.gz", MalformedXmlError, "truncated gzip"),
    ("image-as.xml", UnknownFormatError, "PNG image"),
    ("esearch-as.xml", ParseError, "not a document"),
    ("esearch.xml", UnknownFormatError, "root element is <eSearchResult>"),
]


@pytest.mark.parametrize(("name", "error", "reason"), CASES)
def test_parse_file_refuses(name: str, error: type[ValueError], reason: str, chunker: Chunker) -> None:
    with pytest.raises(error, match=reason):
        list(parse_file(HOSTILE / name, chunker=chunker))


@pytest.mark.parametrize("name", ["xxe.xml", "billion-laughs.xml", "image-as.xml", "esearch-as.xml", "esearch.xml"])
@pytest.mark.parametrize("fmt", ["pubmed-xml", "jats-xml", "bookshelf-nxml"])
def test_parse_content_refuses(name: str, fmt: str, chunker: Chunker) -> None:
    data = (HOSTILE / name).read_bytes()
    with pytest.raises(ValueError) as info:
        parse_content(fmt, data, chunker=chunker)  # type: ignore[arg-type]
    assert str(info.value)


def test_xmlsafe_directly() -> None:
    with pytest.raises(UnsafeXmlError):
        parse_xml((HOSTILE / "billion-laughs.xml").read_bytes())
    with pytest.raises(UnsafeXmlError):
        list(iter_pubmed_records((HOSTILE / "xxe.xml").read_bytes()))
    with pytest.raises(MalformedXmlError, match="empty"):
        parse_xml(b"  ")
    with pytest.raises(MalformedXmlError, match="not a PubMed XML set"):
        list(iter_pubmed_records((HOSTILE.parent / "pmc" / "mds526.nxml").read_bytes()))
    # an external DTD reference, as in every NCBI file, is accepted and never loaded
    ok = b'<?xml version="1.0"?><!DOCTYPE x SYSTEM "file:///etc/passwd"><x>fine</x>'
    assert parse_xml(ok).text == "fine"
    assert parse_xml('<?xml version="1.0" encoding="ISO-8859-1"?><x>é</x>').text == "é"


def test_truncated_set_yields_records_before_the_break(chunker: Chunker) -> None:
    got: list[str] = []
    with pytest.raises(MalformedXmlError):
        for doc in parse_file(HOSTILE / "truncated-pubmed.xml", chunker=chunker):
            got.append(doc.source_id)
    assert got == ["11748933"]


def test_detect_format() -> None:
    assert detect_format(b"<?xml version='1.0'?>\n<!-- c -->\n<PubmedArticleSet>") == "pubmed-xml"
    assert detect_format(b'<!DOCTYPE article PUBLIC "x" "y.dtd">\n<article>') == "jats-xml"
    assert detect_format(b"<book-part-wrapper dtd-version='2.0'>") == "bookshelf-nxml"
    assert detect_format(b'{"source_id": "1"}\n') == "jsonl"
    for bad, reason in (
        (b"%PDF-1.4", "PDF"),
        (b"", "empty"),
        (b"<html><body>", "HTML"),
        (b"hello", "neither"),
    ):
        with pytest.raises(UnknownFormatError, match=reason):
            detect_format(bad)


def test_cli_prints_documents(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parse", str(ROOT / "tests" / "fixtures" / "pubmed" / "pubmed2.xml")]) == 0
    lines = capsys.readouterr().out.splitlines()
    objs = [json.loads(line) for line in lines]
    assert [o["pmid"] for o in objs] == ["11748933", "11700088"]
    contract = set(
        [
            "source",
            "source_id",
            "pmid",
            "pmcid",
            "doi",
            "title",
            "abstract",
            "abstract_sections",
            "authors",
            "journal",
            "pub_date",
            "year",
            "language",
            "publication_types",
            "study_type",
            "evidence_level",
            "mesh",
            "keywords",
            "retracted",
            "sections",
            "chunks",
        ]
    )
    for o in objs:
        assert contract <= set(o)
        assert set(o["journal"]) == {"title", "iso_abbrev", "volume", "issue", "pages"}
        assert {"section", "ordinal", "text", "token_count", "char_start", "char_end"} <= set(o["chunks"][0])


@pytest.mark.parametrize(
    ("name", "reason"),
    [("xxe.xml", "internal DTD"), ("image-as.xml", "PNG"), ("truncated-jats.nxml", "not well-formed")],
)
def test_cli_exits_non_zero_with_reason(name: str, reason: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parse", str(HOSTILE / name)]) == 1
    err = capsys.readouterr().err
    assert reason in err and name in err


def test_cli_as_a_process() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "cli.main", "parse", str(HOSTILE / "billion-laughs.xml")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1 and "entity" in proc.stderr and proc.stdout == ""
    missing = subprocess.run(
        [sys.executable, "-m", "cli.main", "parse", str(HOSTILE / "nope.xml")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert missing.returncode == 1 and "no such file" in missing.stderr
