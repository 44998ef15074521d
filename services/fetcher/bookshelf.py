"""NCBI Bookshelf Open Access: the ``file_list.csv``, package downloads and safe NXML extraction.

The list (setting ``EVIDENTIA_BOOKSHELF_FILE_LIST_URL``) has one row per open-access book:
package path (relative to ``EVIDENTIA_BOOKSHELF_BASE_URL``, e.g. ``ca/84/gene_NBK1116.tar.gz``),
title, publisher, year, accession (``NBKnnn``) and last update. Columns are found by their header
names when the first row is a header, else by position in that order.

A package is a ``.tar.gz`` with the book's ``.nxml`` parts, PDFs and images. Extraction is done in
memory from the tar stream, never onto disk, and refuses anything that is not a regular file (links,
devices), absolute names and names with ``..`` (path traversal), and oversized members. Front
matter (``fm-*``), reference lists (``rl-*``), acknowledgements (``ak-*``) and the table of contents
(``TOC.nxml``) are skipped: they are not guideline text.
"""

from __future__ import annotations

import asyncio
import csv
import io
import logging
import tarfile
import tempfile
import urllib.parse
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import IO

import httpx

from services.fetcher.bulk import xml_to_events
from services.fetcher.eutils import (
    EutilsError,
    EutilsUnavailable,
    NcbiHttpClient,
    retryable,
    send_with_retries,
)
from shared.events import DocumentFetched
from shared.http_retry import RetryableResponse, retry_async
from shared.metrics import NCBI_REQUESTS

log = logging.getLogger(__name__)

SKIPPED_PREFIXES = ("fm-", "rl-", "ak-")
SKIPPED_NAMES = frozenset({"toc.nxml"})


class BookshelfError(EutilsError):
    """A Bookshelf list or package could not be fetched or read."""


class BookshelfUnavailable(BookshelfError, EutilsUnavailable):
    """The Bookshelf server kept failing (5xx, timeouts): transient, the package is retried later."""


@dataclass(frozen=True)
class BookshelfPackage:
    """One row of the Bookshelf Open Access ``file_list.csv``."""

    path: str
    title: str
    publisher: str
    year: str
    accession: str
    last_updated: str


@dataclass(frozen=True)
class NxmlFile:
    accession: str
    filename: str
    data: bytes


# ------------------------------------------------------------------------------------------ file list

_COLUMN_KEYS: dict[str, tuple[str, ...]] = {
    "path": ("file", "path"),
    "title": ("title",),
    "publisher": ("publisher",),
    "year": ("year", "date"),
    "accession": ("accession",),
    "last_updated": ("updated",),
}
_POSITIONAL = ("path", "title", "publisher", "year", "accession", "last_updated")


def _header_map(row: Sequence[str]) -> dict[str, int] | None:
    if not row or row[0].strip().lower().endswith(".tar.gz"):
        return None
    lowered = [cell.strip().lower() for cell in row]
    found: dict[str, int] = {}
    for column, keys in _COLUMN_KEYS.items():
        for index, cell in enumerate(lowered):
            if index not in found.values() and any(k in cell for k in keys):
                found[column] = index
                break
    if "path" not in found or "accession" not in found:
        return dict(zip(_POSITIONAL, range(len(_POSITIONAL)), strict=True))
    return found


def parse_file_list(text: str) -> list[BookshelfPackage]:
    """Rows of ``file_list.csv``; rows without a package path or accession are skipped."""
    reader = csv.reader(io.StringIO(text))
    rows = [row for row in reader if any(cell.strip() for cell in row)]
    if not rows:
        return []
    header = _header_map(rows[0])
    columns = header or dict(zip(_POSITIONAL, range(len(_POSITIONAL)), strict=True))
    body = rows[1:] if header is not None else rows
    out: list[BookshelfPackage] = []
    for row in body:

        def cell(name: str, row: list[str] = row) -> str:
            index = columns.get(name)
            return row[index].strip() if index is not None and index < len(row) else ""

        path, accession = cell("path"), cell("accession")
        if not path or not accession:
            continue
        title, publisher, year, updated = cell("title"), cell("publisher"), cell("year"), cell("last_updated")
        out.append(BookshelfPackage(path, title, publisher, year, accession, updated))
    return out


def _publisher_key(name: str) -> str:
    return " ".join(name.split()).casefold()


def filter_publisher(packages: Sequence[BookshelfPackage], publisher: str) -> list[BookshelfPackage]:
    """Packages whose publisher is exactly ``publisher`` (case and runs of spaces aside).

    Exact, not a substring: "A" used to match almost every book of the list.
    """
    wanted = _publisher_key(publisher)
    return [p for p in packages if _publisher_key(p.publisher) == wanted]


def similar_publishers(packages: Sequence[BookshelfPackage], publisher: str, limit: int = 5) -> list[str]:
    """Publisher names containing ``publisher`` (for the error of a name that matched nothing)."""
    wanted = _publisher_key(publisher)
    names = dict.fromkeys(p.publisher for p in packages if wanted and wanted in _publisher_key(p.publisher))
    return list(names)[:limit]


class PublisherRefused(BookshelfError):
    """A publisher name that matches no package, or more packages than one ingest may take."""


def publisher_packages(packages: Sequence[BookshelfPackage], publisher: str, cap: int) -> list[BookshelfPackage]:
    """The packages of ``publisher`` (exact name), or :class:`PublisherRefused` with the reason."""
    found = filter_publisher(packages, publisher)
    if not found:
        similar = similar_publishers(packages, publisher)
        hint = f"; publishers with a similar name: {', '.join(similar)}" if similar else ""
        raise PublisherRefused(f"no Bookshelf Open Access package of publisher {publisher!r}{hint}")
    if len(found) > cap:
        raise PublisherRefused(
            f"publisher {publisher!r} has {len(found)} Bookshelf packages, over the cap of {cap} "
            "(EVIDENTIA_BOOKSHELF_MAX_PACKAGES)"
        )
    return found


def package_url(base_url: str, package: BookshelfPackage) -> str:
    """The package's URL under ``base_url``; a path leaving the base (absolute, ``..``) is refused."""
    path = package.path.strip()
    parts = PurePosixPath(path).parts
    if not path or urllib.parse.urlsplit(path).scheme or path.startswith("/") or ".." in parts:
        raise BookshelfError(f"refused package path {package.path!r} of {package.accession}")
    return urllib.parse.urljoin(base_url.rstrip("/") + "/", path)


# ------------------------------------------------------------------------------------------ extraction


def safe_member_name(name: str) -> str | None:
    """The member's normalised relative name, or None if it is absolute or escapes with ``..``."""
    if not name or "\\" in name or "\x00" in name:
        return None
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or (path.parts and ":" in path.parts[0]):
        return None
    parts = [p for p in path.parts if p not in ("", ".")]
    return "/".join(parts) or None


def extract_nxml(
    fileobj: IO[bytes],
    accession: str,
    *,
    max_member_bytes: int = 64 * 1024**2,
    refused: list[str] | None = None,
) -> Iterator[tuple[str, str, bytes]]:
    """(accession, file name inside the package, bytes) for every usable ``.nxml`` of a ``.tar.gz``.

    Unsafe members (links, devices, absolute or ``..`` names, too big) are not extracted; their
    names are appended to ``refused`` when given, and logged.
    """

    def refuse(name: str, why: str) -> None:
        log.warning("Bookshelf member refused", extra={"accession": accession, "member": name, "why": why})
        if refused is not None:
            refused.append(name)

    try:
        with tarfile.open(fileobj=fileobj, mode="r|*") as tar:
            for member in tar:
                if member.isdir():
                    continue
                name = safe_member_name(member.name)
                if name is None:
                    refuse(member.name, "absolute or parent-relative name")
                    continue
                if not member.isfile():
                    if member.name.lower().endswith(".nxml"):
                        refuse(member.name, "not a regular file (link or device)")
                    continue
                base = PurePosixPath(name).name
                if not base.lower().endswith(".nxml"):
                    continue
                if base.lower().startswith(SKIPPED_PREFIXES) or base.lower() in SKIPPED_NAMES:
                    continue
                if member.size > max_member_bytes:
                    refuse(member.name, f"{member.size} bytes, over {max_member_bytes}")
                    continue
                handle = tar.extractfile(member)
                if handle is None:
                    refuse(member.name, "unreadable")
                    continue
                yield accession, name, handle.read()
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise BookshelfError(f"package {accession} is not a readable .tar.gz: {exc}") from exc


def nxml_events(
    files: Sequence[tuple[str, str, bytes]], *, job_id: str | None = None, trace_id: str | None = None
) -> Iterator[DocumentFetched]:
    """Events for extracted parts (``bookshelf-nxml``); unusable files are logged and skipped."""
    for accession, filename, data in files:
        try:
            yield from xml_to_events(data, filename, accession=accession, job_id=job_id, trace_id=trace_id)
        except ValueError as exc:
            log.warning("Bookshelf part skipped", extra={"file": f"{accession}/{filename}", "error": str(exc)})


# ------------------------------------------------------------------------------------------ client


class BookshelfClient(NcbiHttpClient):
    """Downloads the list and packages with httpx (retries as for E-utilities; no NCBI rate limit)."""

    follow_redirects = True

    async def file_list(self) -> list[BookshelfPackage]:
        """Every package in the Bookshelf Open Access file list (downloaded and parsed on each call)."""
        response = await send_with_retries(
            self.http,
            "GET",
            self.settings.bookshelf_file_list_url,
            utility="bookshelf-list",
            policy=self.policy,
            limiter=None,
            sleep=self._sleep,
            rng=self._rng,
        )
        return parse_file_list(response.text)

    async def packages(self, publisher: str | None = None) -> list[BookshelfPackage]:
        """The packages of ``publisher`` (exact name), or every package when ``publisher`` is None."""
        found = await self.file_list()
        return filter_publisher(found, publisher) if publisher else found

    async def download(self, package: BookshelfPackage, dest: IO[bytes]) -> int:
        """Stream the package into ``dest`` (rewound and truncated on each retry); its size."""
        url = package_url(self.settings.bookshelf_base_url, package)
        limit = self.settings.bookshelf_max_package_bytes

        async def attempt() -> int:
            dest.seek(0)
            dest.truncate()
            try:
                async with self.http.stream("GET", url) as response:
                    NCBI_REQUESTS.labels(utility="bookshelf-package", status=str(response.status_code)).inc()
                    if response.status_code == 200:
                        size = 0
                        async for chunk in response.aiter_bytes(1 << 20):
                            size += len(chunk)
                            if size > limit:
                                raise BookshelfError(f"package {package.accession} is over {limit} bytes")
                            dest.write(chunk)
                        dest.seek(0)
                        return size
                    if not retryable(response.status_code):
                        raise BookshelfError(
                            f"package {package.accession}: HTTP {response.status_code} from {url}",
                            status=response.status_code,
                        )
                    status = response.status_code
                    raise RetryableResponse.from_headers(f"HTTP {status}", response.headers, status=status)
            except httpx.TimeoutException as exc:
                NCBI_REQUESTS.labels(utility="bookshelf-package", status="timeout").inc()
                raise RetryableResponse("timed out") from exc
            except httpx.TransportError as exc:
                NCBI_REQUESTS.labels(utility="bookshelf-package", status="error").inc()
                raise RetryableResponse(f"connection failed: {exc}") from exc

        try:
            return await retry_async(
                attempt,
                wait=self.policy.wait(self._rng),
                sleep=self._sleep,
                max_attempts=self.policy.max_retries + 1,
            )
        except RetryableResponse as failure:
            raise BookshelfUnavailable(
                f"package {package.accession}: gave up after retries: {failure.problem}"
            ) from None

    async def iter_nxml(self, package: BookshelfPackage) -> AsyncIterator[tuple[str, str, bytes]]:
        """Download one package and yield its usable ``.nxml`` parts."""
        with tempfile.SpooledTemporaryFile(max_size=32 * 1024**2) as spool:
            await self.download(package, spool)  # type: ignore[arg-type]
            files = await asyncio.to_thread(
                lambda: list(
                    extract_nxml(
                        spool,  # type: ignore[arg-type]
                        package.accession,
                        max_member_bytes=self.settings.bookshelf_max_member_bytes,
                    )
                )
            )
        for item in files:
            yield item

    async def iter_publisher(self, publisher: str) -> AsyncIterator[tuple[str, str, bytes]]:
        """Every usable part of every package of ``publisher``, one package at a time."""
        for package in await self.packages(publisher):
            async for item in self.iter_nxml(package):
                yield item
