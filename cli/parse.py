"""``evidentia parse FILE [--format jsonl]``: print every document of a file as one JSON object a line.

PubMed XML, PMC JATS or Bookshelf NXML (plain or gzipped; the format is detected from the content), or
JSON lines of documents. Needs neither Kafka nor PostgreSQL. The keys are the public contract in
``docs/parse-contract.md``. A file that cannot be parsed exits with status 1 and the reason on stderr
(documents printed before a break in a PubMed set stay printed).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "parse",
        help="Parse a PubMed/PMC/Bookshelf file and print its documents as JSON lines.",
        description="Parse FILE (PubMed XML, PMC JATS or Bookshelf NXML, plain or gzipped) and print one "
        "JSON object per document (keys: docs/parse-contract.md).",
    )
    p.add_argument("file", metavar="FILE", help="File to parse (format detected from its content).")
    p.add_argument(
        "--format", choices=["jsonl"], default="jsonl", help="Output format (JSON lines; --json is the same)."
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from services.parser.core import parse_file
    from services.parser.tokens import TokenizerError

    out = sys.stdout
    try:
        for doc in parse_file(args.file):
            out.write(doc.model_dump_json() + "\n")
        out.flush()
    except (ValueError, OSError, TokenizerError) as exc:
        out.flush()
        print(f"evidentia parse: {args.file}: {exc}", file=sys.stderr)
        return 1
    return 0
