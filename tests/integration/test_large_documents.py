"""Issue #16 items 2 and 3 through the running stack: a Bookshelf publisher is split into one event per
package, a part larger than the claim-check threshold travels by reference and is stored once, and a
package that cannot be read fails its task with the reason while the job still completes."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator

import pytest

from tests.integration.conftest import Stack
from tests.integration.db import db_fetch
from tests.integration.test_fetcher_sources import FIXTURES, delete_documents, embedded_chunks, ingest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PUBLISHER = "Claim Check Test Press"
BIG = "NBK997001"
BROKEN = "NBK997002"
PART = "NBK99790"


def big_nxml() -> bytes:
    """The malaria guideline with one accession per chapter, made larger than the claim-check threshold by an
    XML comment of ~300 KB (transport is what is tested; a comment adds no chunks to embed)."""
    text = (FIXTURES / "bookshelf" / "malaria-guideline.nxml").read_text("utf-8")
    for n in range(1, 5):
        old = f'<book-part id="ch{n}" book-part-type="chapter">\n      <book-part-meta>'
        text = text.replace(old, old + f'<book-part-id book-part-id-type="accession">{PART}{n}</book-part-id>')
    start = text.index("<p>", text.index(f"{PART}1"))
    padding = "<!-- " + "archived revision notes " * 12_500 + "-->"
    return (text[:start] + padding + text[start:]).encode()


def package(accession: str, data: bytes) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo(f"{accession}/{accession}.nxml")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture
def two_packages(stack: Stack) -> Iterator[bytes]:
    data = big_nxml()
    fake = stack.fake
    fake.add_static(
        "/pub/litarch/file_list.csv",
        (
            "File,Title,Publisher,Year,Accession ID,Last Updated (YYYY-MM-DD HH:MM:SS)\n"
            f"aa/01/big_{BIG}.tar.gz,A big guideline,{PUBLISHER},2024,{BIG},2025-01-02 03:04:05\n"
            f"aa/02/bad_{BROKEN}.tar.gz,A broken package,{PUBLISHER},2024,{BROKEN},2025-01-02 03:04:05\n"
            f"aa/03/other.tar.gz,Another press's book,{PUBLISHER} International,2024,NBK997003,2025-01-02\n"
        ).encode(),
        "text/csv",
    )
    fake.add_static(f"/pub/litarch/aa/01/big_{BIG}.tar.gz", package(BIG, data), "application/gzip")
    fake.add_static(f"/pub/litarch/aa/02/bad_{BROKEN}.tar.gz", b"this is not a tar archive", "application/gzip")
    try:
        yield data
    finally:
        delete_documents(stack.infra.postgres.url, "source = 'bookshelf' AND source_id LIKE $1", f"{PART}%")


def test_large_part_by_reference_and_a_broken_package_does_not_stall_the_job(stack: Stack, two_packages: bytes) -> None:
    assert len(two_packages) > 256 * 1024  # over the default claim-check threshold
    status = ingest(stack, {"bookshelf_publisher": PUBLISHER.upper()})  # exact name, case aside
    assert status["done"] and status["state"] == "done", status
    error = str(status["error"])
    assert f"bookshelf:{BROKEN}" in error and "not a readable .tar.gz" in error, status
    assert status["counts"]["embedded"] == 4 and status["total"] == 4, status  # type: ignore[index]

    url = stack.infra.postgres.url
    stored = db_fetch(url, "SELECT bytes FROM raw_documents WHERE document_id LIKE $1", f"bookshelf:{PART}%")
    assert len(stored) == 1 and stored[0]["bytes"] > 256 * 1024, "the part travelled by reference, stored once"
    chunks = embedded_chunks(url, f"bookshelf:{PART}1")
    assert chunks and all(c["vector"] for c in chunks)
    tasks = db_fetch(url, "SELECT task_id, state FROM ingest_job_tasks WHERE job_id = $1", status["job_id"])
    assert sorted((t["task_id"], t["state"]) for t in tasks) == [
        (f"bookshelf:{BIG}", "done"),
        (f"bookshelf:{BROKEN}", "failed"),
    ]
    requested = [r.path for r in stack.fake.requests if "/pub/litarch/" in r.path]
    assert not any("other.tar.gz" in p for p in requested)  # a longer name containing it is not a match


def test_a_publisher_that_matches_nothing_fails_the_job_with_the_reason(stack: Stack, two_packages: bytes) -> None:
    status = ingest(stack, {"bookshelf_publisher": "Claim"})
    assert status["state"] == "failed" and status["done"], status
    assert "no Bookshelf Open Access package" in str(status["error"]) and PUBLISHER in str(status["error"])
