"""``evidentia search``: print the passages the retriever finds."""

from __future__ import annotations

import argparse
import json
from typing import Any, get_args

from cli._common import out, post_gateway
from cli.ask import filters
from shared.models import SearchMode
from shared.settings import get_settings


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("search", help="Search passages (dense, lexical or hybrid).")
    p.add_argument("query")
    p.add_argument("--mode", default="hybrid", choices=get_args(SearchMode))
    p.add_argument("--top-n", type=int, default=10)
    p.add_argument("--year-from", type=int)
    p.add_argument("--year-to", type=int)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    body = {"query": args.query, "mode": args.mode, "top_n": args.top_n, "filters": filters(args)}
    data = post_gateway(get_settings(), "/v1/search", body)
    if data is None:
        return 1
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    for h in data["hits"]:
        out.print(f"{h['rank']:>2}. {h['score']:.4f}  {h['document_id']}  {h['title'][:90]}", markup=False)
    return 0
