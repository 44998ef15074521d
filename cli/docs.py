"""``evidentia docs``: regenerate docs/schemas (JSON Schema per event) and docs/asyncapi (per service)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("docs", help="Regenerate event JSON Schemas and AsyncAPI documents.")
    p.add_argument("--out", type=Path, default=Path("docs"))
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from docgen.contracts import write_asyncapi, write_schemas

    paths = write_schemas(args.out) + write_asyncapi(args.out)
    if getattr(args, "json", False):
        print(json.dumps([str(p) for p in paths], indent=2))
        return 0
    for path in paths:
        print(path)
    return 0
