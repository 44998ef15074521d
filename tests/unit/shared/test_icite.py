"""Reading the NIH iCite snapshot CSV (shared/icite/parse.py): the hand-made fixture in
tests/fixtures/icite (see its README), blank fields, malformed rows, missing columns, batching."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from shared.icite.parse import COLUMNS, BadRow, IciteRow, MissingColumns, batches, read_icite

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "icite" / "icite_metadata.csv"
HEADER = FIXTURE.read_text(encoding="utf-8").splitlines()[0]


def read(text: str) -> list[IciteRow | BadRow]:
    return list(read_icite(io.StringIO(text, newline="")))


def test_the_fixture_gives_four_rows_and_four_reasons() -> None:
    with FIXTURE.open(encoding="utf-8", newline="") as f:
        rows = list(read_icite(f))
    good = {r.pmid: r for r in rows if isinstance(r, IciteRow)}
    bad = [r for r in rows if isinstance(r, BadRow)]
    assert set(good) == {"23456789", "39000001", "39000002", "39000003"}
    documented = good["23456789"]  # the iCite API documentation's example paper
    assert (documented.citation_count, documented.relative_citation_ratio, documented.nih_percentile) == (
        46,
        1.78,
        71.0,
    )
    assert (documented.year, documented.apt, documented.is_clinical, documented.provisional) == (
        2013,
        0.75,
        False,
        False,
    )
    assert good["39000002"].is_research_article is True and good["39000002"].provisional is False  # Yes / No
    assert [(b.line, b.reason.split(" ")[0]) for b in bad] == [
        (6, "pmid"),
        (7, "citation_count"),
        (8, "nih_percentile"),
        (9, "fewer"),
    ]


def test_blank_fields_are_null_not_zero() -> None:
    (row,) = read(HEADER + "\n39000003,,t,a,2025,J,True,,,1.0,0.0,0.0,,False,3,3.0,,,True,0.0,1.0,,39100006,\n")
    assert isinstance(row, IciteRow)
    assert row.relative_citation_ratio is None and row.nih_percentile is None and row.apt is None
    assert row.expected_citations_per_year is None and row.field_citation_rate is None
    assert row.citation_count == 3 and row.provisional is True


def test_columns_are_found_by_name_in_any_order_and_unknown_ones_ignored() -> None:
    text = "nih_percentile,citation_count,extra,relative_citation_ratio,pmid\n88.5,17,x,2.5,00012345\n"
    (row,) = read(text)
    assert isinstance(row, IciteRow)
    assert row.pmid == "12345"  # leading zeros dropped: the PMID as PubMed writes it
    assert (row.nih_percentile, row.citation_count, row.relative_citation_ratio) == (88.5, 17, 2.5)
    assert row.year is None and row.is_clinical is None  # columns the file lacks


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("0,1,1.0,50", "pmid is not a PubMed id"),
        (",1,1.0,50", "pmid is not a PubMed id"),
        ("7,-2,1.0,50", "citation_count is negative"),
        ("7,2.5,1.0,50", "citation_count is not a whole number"),
        ("7,2,abc,50", "relative_citation_ratio is not a number"),
        ("7,2,inf,50", "relative_citation_ratio is not a finite number"),
        ("7,2,1.0,-1", "nih_percentile is outside 0-100"),
        ("7,2,1.0,50,extra", "more fields than the header has columns"),
    ],
)
def test_a_malformed_row_is_reported_with_its_line_and_the_rest_is_read(line: str, reason: str) -> None:
    rows = read(f"pmid,citation_count,relative_citation_ratio,nih_percentile\n{line}\n8,3,1.5,60\n")
    assert isinstance(rows[0], BadRow) and rows[0].line == 2 and rows[0].reason.startswith(reason)
    assert isinstance(rows[1], IciteRow) and rows[1].pmid == "8"


def test_an_unknown_boolean_is_a_bad_row() -> None:
    (row,) = read("pmid,citation_count,relative_citation_ratio,nih_percentile,is_clinical\n7,1,1,1,maybe\n")
    assert isinstance(row, BadRow) and "is_clinical" in row.reason


def test_a_file_without_the_metric_columns_is_refused_before_any_row() -> None:
    with pytest.raises(MissingColumns) as caught:
        read("pmid,title,year\n1,A,2020\n")
    assert caught.value.missing == ["citation_count", "relative_citation_ratio", "nih_percentile"]
    assert "not an iCite snapshot CSV" in str(caught.value) and "pmid, title, year" in str(caught.value)
    with pytest.raises(MissingColumns):
        read("")  # empty file: no header at all


def test_fields_longer_than_the_csv_default_limit_are_read() -> None:
    cited_by = " ".join(str(30_000_000 + i) for i in range(20_000))  # ~180 KB, over csv's 128 KiB default
    (row,) = read(f"pmid,citation_count,relative_citation_ratio,nih_percentile,cited_by\n5,20000,9.1,99.9,{cited_by}\n")
    assert isinstance(row, IciteRow) and row.citation_count == 20_000


def test_reading_is_lazy() -> None:
    def lines() -> object:
        yield "pmid,citation_count,relative_citation_ratio,nih_percentile\n"
        yield "1,1,1,1\n"
        raise AssertionError("read past the first row")

    first = next(read_icite(lines()))  # type: ignore[arg-type]
    assert isinstance(first, IciteRow) and first.pmid == "1"


def test_batches_cut_good_rows_carry_bad_ones_and_keep_the_last_of_a_pmid() -> None:
    def row(pmid: str, count: int) -> IciteRow:
        return IciteRow(pmid, None, count, None, None, None, None, None, None, None, None, None)

    stream: list[IciteRow | BadRow] = [row("1", 1), BadRow(3, "x"), row("1", 2), row("2", 1), row("3", 1)]
    out = list(batches(stream, size=2))
    assert [([r.pmid for r in good], [b.line for b in bad]) for good, bad in out] == [(["1", "2"], [3]), (["3"], [])]
    assert out[0][0][0].citation_count == 2  # the later row of PMID 1 wins
    assert COLUMNS[0] == "pmid" and len(row("1", 1).record()) == len(COLUMNS)
