"""``evidentia import icite FILE``: load the NIH iCite database snapshot's citation metrics into PostgreSQL.

FILE is the snapshot's ``icite_metadata.csv`` (also as the downloaded ``.zip`` holding it, or gzipped),
read as a stream: the whole file is never in memory. Rows are upserted on PMID in batches (a re-import
replaces the metrics of the PMIDs it holds, no others); malformed rows are counted, the first ones shown, and
skipped. Writes straight to the database (``EVIDENTIA_DATABASE_URL``), applying pending migrations first.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import io
import json
import sys
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from cli import exits
from shared.settings import get_settings


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("import", help="Load reference data into the store (the NIH iCite snapshot).")
    sub = p.add_subparsers(dest="import_what", metavar="WHAT", required=True)
    icite = sub.add_parser(
        "icite",
        help="Citation metrics from the NIH iCite snapshot CSV (icite_metadata.csv, .zip or .gz), upserted on PMID.",
    )
    icite.add_argument("file", type=Path, metavar="FILE", help="icite_metadata.csv (or the .zip / .gz holding it).")
    icite.add_argument("--batch", type=int, default=10_000, help="Rows per COPY and upsert (default 10000).")
    icite.set_defaults(func=run_icite)


@contextmanager
def open_text(path: Path) -> Iterator[IO[str]]:
    """``path`` as a text stream: a CSV, a gzipped CSV, or a zip whose (first) ``.csv`` member is read."""
    if path.suffix.lower() == ".zip":
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist() if n.lower().endswith(".csv")]
            if not names:
                raise ValueError(f"{path}: the zip holds no .csv file")
            with archive.open(names[0]) as raw, io.TextIOWrapper(raw, encoding="utf-8-sig", newline="") as text:
                yield text
    elif path.suffix.lower() == ".gz":
        with gzip.open(path, "rt", encoding="utf-8-sig", newline="") as text:
            yield text
    else:
        with path.open(encoding="utf-8-sig", newline="") as text:
            yield text


def run_icite(args: argparse.Namespace) -> int:
    from shared.icite.parse import MissingColumns

    as_json = bool(getattr(args, "json", False))
    path: Path = args.file
    if not path.is_file():
        print(f"evidentia: error: no such file: {path}", file=sys.stderr)
        return exits.NOINPUT
    if args.batch < 1:
        print("evidentia: error: --batch must be at least 1", file=sys.stderr)
        return exits.USAGE
    try:
        result = asyncio.run(_import(path, args.batch, progress=not as_json))
    except (MissingColumns, UnicodeDecodeError, zipfile.BadZipFile, gzip.BadGzipFile, ValueError) as exc:
        print(f"evidentia: error: {path}: {exc}", file=sys.stderr)
        return exits.DATAERR
    bad = [{"line": b.line, "reason": b.reason} for b in result.bad]
    if as_json:
        print(
            json.dumps(
                {
                    "loaded": result.loaded,
                    "inserted": result.inserted,
                    "updated": result.updated,
                    "skipped": result.skipped,
                    "bad_rows": bad,
                }
            )
        )
    else:
        print(
            f"loaded {result.loaded} rows ({result.inserted} new, {result.updated} updated), "
            f"skipped {result.skipped} malformed"
        )
        for b in bad:
            print(f"  line {b['line']}: {b['reason']}", file=sys.stderr)
        if result.skipped > len(bad):
            print(f"  ... and {result.skipped - len(bad)} more", file=sys.stderr)
    return exits.OK


async def _import(path: Path, batch: int, *, progress: bool) -> Any:
    from shared.db import create_pool
    from shared.icite.parse import read_icite
    from shared.icite.store import IciteImport, load_icite

    def report(so_far: IciteImport) -> None:
        if progress:
            print(f"\r{so_far.loaded} rows loaded, {so_far.skipped} skipped", end="", file=sys.stderr, flush=True)

    pool = await create_pool(get_settings().database, max_size=1)
    try:
        async with pool.acquire() as conn:
            with open_text(path) as text:
                result = await load_icite(conn, read_icite(text), batch, on_batch=report)
    finally:
        await pool.close()
    if progress:
        print(file=sys.stderr)
    return result
