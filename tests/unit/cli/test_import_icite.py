"""``evidentia import icite``: the snapshot read as it is downloaded (zip), gzipped or plain, and the refusals
that need no database. The load itself runs on PostgreSQL in tests/integration/test_citation_metrics_store.py."""

from __future__ import annotations

import gzip
import zipfile
from pathlib import Path

import pytest

from cli import exits
from cli.importer import open_text
from cli.main import main
from shared.icite.parse import IciteRow, read_icite

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "icite" / "icite_metadata.csv"


def pmids(path: Path) -> list[str]:
    with open_text(path) as text:
        return [r.pmid for r in read_icite(text) if isinstance(r, IciteRow)]


def test_plain_zipped_and_gzipped_snapshots_read_alike(tmp_path: Path) -> None:
    expected = ["23456789", "39000001", "39000002", "39000003"]
    assert pmids(FIXTURE) == expected
    zipped = tmp_path / "icite_metadata.zip"
    with zipfile.ZipFile(zipped, "w") as archive:
        archive.writestr("README.txt", "not the data")
        archive.write(FIXTURE, "icite_metadata.csv")
    assert pmids(zipped) == expected
    gz = tmp_path / "icite_metadata.csv.gz"
    gz.write_bytes(gzip.compress(FIXTURE.read_bytes()))
    assert pmids(gz) == expected


def test_a_zip_without_a_csv_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "other.zip"
    with zipfile.ZipFile(empty, "w") as archive:
        archive.writestr("README.txt", "no data")
    with pytest.raises(ValueError, match=r"holds no \.csv"), open_text(empty):
        pass


def test_a_missing_file_and_a_bad_batch_size_need_no_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["import", "icite", str(tmp_path / "none.csv")]) == exits.NOINPUT
    assert "no such file" in capsys.readouterr().err
    assert main(["import", "icite", str(FIXTURE), "--batch", "0"]) == exits.USAGE
    with pytest.raises(SystemExit):
        main(["import"])  # the WHAT is required


def test_search_and_ask_take_the_citation_filters_and_print_the_metrics() -> None:
    from cli.ask import citation_metrics_text, filters
    from cli.main import build_parser

    args = build_parser().parse_args(["search", "statins", "--min-citations", "100", "--min-percentile", "90"])
    assert filters(args) == {"min_citation_count": 100, "min_nih_percentile": 90.0}
    args = build_parser().parse_args(["ask", "Do statins help?", "--min-citations", "0"])
    assert filters(args) == {"min_citation_count": 0}  # 0 is a filter too: papers with metrics only
    hit = {"citation_metrics": {"citation_count": 250, "nih_percentile": 95.3, "relative_citation_ratio": 4.12}}
    assert citation_metrics_text(hit) == "cited 250x, NIH percentile 95.3"
    assert citation_metrics_text({"citation_metrics": None}) == ""


def test_a_byte_order_mark_does_not_hide_the_pmid_column(tmp_path: Path) -> None:
    with_bom = tmp_path / "excel.csv"
    with_bom.write_bytes(b"\xef\xbb\xbf" + FIXTURE.read_bytes())
    assert pmids(with_bom) == ["23456789", "39000001", "39000002", "39000003"]
