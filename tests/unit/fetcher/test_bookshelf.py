"""Bookshelf Open Access: the file list, publisher filter, safe .tar.gz extraction, download."""

from __future__ import annotations

import io
import random
import tarfile
from pathlib import Path

import pytest

from services.fetcher.bookshelf import (
    BookshelfClient,
    BookshelfError,
    BookshelfPackage,
    extract_nxml,
    filter_publisher,
    nxml_events,
    package_url,
    parse_file_list,
)
from tests.fakes.eutils_server import FakeEutils, SleepRecorder, fake_ncbi_settings

FILE_LIST = (
    "File,Title,Publisher,Year,Accession ID,Last Updated (YYYY-MM-DD HH:MM:SS)\n"
    "ca/84/gene_NBK1116.tar.gz,GeneReviews,University of Washington,1993,NBK1116,2025-08-31 02:41:04\n"
    '0b/12/who_NBK500001.tar.gz,"Guidelines for malaria, 2024",World Health Organization,2024,NBK500001,'
    "2025-01-02 03:04:05\n"
    "1c/34/who_NBK500002.tar.gz,HIV guidelines,World Health Organization,2021,NBK500002,2024-05-06 07:08:09\n"
    ",no path,World Health Organization,2020,NBK1,2020-01-01 00:00:00\n"
)

CHAPTER = (
    b'<?xml version="1.0" encoding="UTF-8"?><book-part-wrapper><book-meta/>'
    b'<book-part book-part-type="chapter"><book-part-meta><title-group><title>Ch 1</title></title-group>'
    b"</book-part-meta><body><p>Recommendation.</p></body></book-part></book-part-wrapper>"
)


def _add(tar: tarfile.TarFile, name: str, data: bytes = b"", **kwargs: object) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    for key, value in kwargs.items():
        setattr(info, key, value)
    tar.addfile(info, io.BytesIO(data) if data else None)


def make_package() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        _add(tar, "NBK500001", type=tarfile.DIRTYPE)
        _add(tar, "NBK500001/ch1.nxml", CHAPTER)
        _add(tar, "NBK500001/ch2.nxml", CHAPTER.replace(b"Ch 1", b"Ch 2"))
        _add(tar, "NBK500001/fm-front.nxml", CHAPTER)
        _add(tar, "NBK500001/rl-references.nxml", CHAPTER)
        _add(tar, "NBK500001/ak-acknowledgements.nxml", CHAPTER)
        _add(tar, "NBK500001/TOC.nxml", CHAPTER)
        _add(tar, "NBK500001/figure1.jpg", b"\xff\xd8\xff")
        _add(tar, "../../evil.nxml", b"<x/>")
        _add(tar, "/etc/cron.d/evil.nxml", b"<x/>")
        _add(tar, "NBK500001/../../../evil2.nxml", b"<x/>")
        _add(tar, "NBK500001/link.nxml", type=tarfile.SYMTYPE, linkname="/etc/passwd")
        _add(tar, "NBK500001/hard.nxml", type=tarfile.LNKTYPE, linkname="NBK500001/ch1.nxml")
    return buf.getvalue()


def test_file_list_columns_and_publisher_filter() -> None:
    packages = parse_file_list(FILE_LIST)
    assert len(packages) == 3  # the row without a path is skipped
    who = filter_publisher(packages, "world health organization")
    assert [p.accession for p in who] == ["NBK500001", "NBK500002"]
    assert who[0] == BookshelfPackage(
        "0b/12/who_NBK500001.tar.gz",
        "Guidelines for malaria, 2024",
        "World Health Organization",
        "2024",
        "NBK500001",
        "2025-01-02 03:04:05",
    )


def test_file_list_without_a_header_is_read_by_position() -> None:
    rows = FILE_LIST.splitlines()[1:3]
    assert [p.accession for p in parse_file_list("\n".join(rows))] == ["NBK1116", "NBK500001"]


def test_extraction_skips_front_matter_and_refuses_unsafe_members(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    refused: list[str] = []
    files = list(extract_nxml(io.BytesIO(make_package()), "NBK500001", refused=refused))
    assert [(a, name) for a, name, _ in files] == [
        ("NBK500001", "NBK500001/ch1.nxml"),
        ("NBK500001", "NBK500001/ch2.nxml"),
    ]
    assert files[0][2] == CHAPTER
    assert sorted(refused) == sorted(
        [
            "../../evil.nxml",
            "/etc/cron.d/evil.nxml",
            "NBK500001/../../../evil2.nxml",
            "NBK500001/link.nxml",
            "NBK500001/hard.nxml",
        ]
    )
    assert list(tmp_path.iterdir()) == []  # nothing is ever written to disk
    assert not (tmp_path.parent / "evil.nxml").exists()


def test_oversized_members_and_broken_packages() -> None:
    refused: list[str] = []
    files = list(extract_nxml(io.BytesIO(make_package()), "NBK500001", max_member_bytes=10, refused=refused))
    assert files == [] and "NBK500001/ch1.nxml" in refused
    with pytest.raises(BookshelfError):
        list(extract_nxml(io.BytesIO(b"not a tarball"), "NBK1"))


def test_package_paths_cannot_leave_the_base() -> None:
    base = "https://ftp.ncbi.nlm.nih.gov/pub/litarch/"
    ok = BookshelfPackage("0b/12/who_NBK500001.tar.gz", "", "", "", "NBK500001", "")
    assert package_url(base, ok) == "https://ftp.ncbi.nlm.nih.gov/pub/litarch/0b/12/who_NBK500001.tar.gz"
    for bad in ("../../../etc/passwd", "https://evil.example/x.tar.gz", "/abs/x.tar.gz"):
        with pytest.raises(BookshelfError):
            package_url(base, BookshelfPackage(bad, "", "", "", "NBK1", ""))


async def test_download_filter_extract_and_publish(fake_eutils: FakeEutils) -> None:
    fake_eutils.add_static("/pub/litarch/file_list.csv", FILE_LIST.encode(), "text/csv")
    fake_eutils.add_static("/pub/litarch/0b/12/who_NBK500001.tar.gz", make_package())
    fake_eutils.add_static("/pub/litarch/1c/34/who_NBK500002.tar.gz", make_package())
    fake_eutils.fail_next(503, retry_after=1)  # the list download is retried
    sleeps = SleepRecorder()
    settings = fake_ncbi_settings(fake_eutils)
    async with BookshelfClient(settings, sleep=sleeps, rng=random.Random(3)) as client:
        files = [item async for item in client.iter_publisher("World Health Organization")]
    assert [(a, n) for a, n, _ in files] == [
        ("NBK500001", "NBK500001/ch1.nxml"),
        ("NBK500001", "NBK500001/ch2.nxml"),
        ("NBK500002", "NBK500001/ch1.nxml"),
        ("NBK500002", "NBK500001/ch2.nxml"),
    ]
    assert sleeps.delays and sleeps.delays[0] >= 1
    events = list(nxml_events(files, job_id="job-b"))
    assert [e.document_id for e in events] == [
        "bookshelf:NBK500001_ch1",
        "bookshelf:NBK500001_ch2",
        "bookshelf:NBK500002_ch1",
        "bookshelf:NBK500002_ch2",
    ]
    assert all(e.format == "bookshelf-nxml" and e.source == "bookshelf" and e.job_id == "job-b" for e in events)
    gnr = [r for r in fake_eutils.requests if r.path.endswith("gene_NBK1116.tar.gz")]
    assert gnr == []  # other publishers' packages are not downloaded


async def test_a_missing_package_is_a_clear_error(fake_eutils: FakeEutils) -> None:
    settings = fake_ncbi_settings(fake_eutils)
    async with BookshelfClient(settings, sleep=SleepRecorder()) as client:
        package = BookshelfPackage("0b/12/none.tar.gz", "", "WHO", "", "NBK9", "")
        with pytest.raises(BookshelfError, match="HTTP 404"):
            _ = [item async for item in client.iter_nxml(package)]
