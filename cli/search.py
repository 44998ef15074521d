"""``evidentia search``: print the passages the retriever finds."""

from __future__ import annotations

import argparse
from typing import Any, get_args

from cli import exits
from cli._common import out, print_json, wants_json
from cli.ask import add_filter_flags, citation_metrics_text, filters
from cli.gateway import client_from_args
from shared.models import SearchMode


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("search", help="Search passages (dense, lexical or hybrid).")
    p.add_argument("query")
    p.add_argument("--mode", default="hybrid", choices=get_args(SearchMode))
    p.add_argument("--top-n", type=int, default=10)
    add_filter_flags(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    body = {"query": args.query, "mode": args.mode, "top_n": args.top_n, "filters": filters(args)}
    with client_from_args(args) as gw:
        data = gw.post_json("/v1/search", body, what="search")
    if wants_json(args):
        print_json(data)
        return exits.OK
    for h in data["hits"]:
        metrics = citation_metrics_text(h)
        out.print(
            f"{h['rank']:>2}. {h['score']:.4f}  {h['document_id']}  {h['title'][:90]}"
            + (f"  ({metrics})" if metrics else ""),
            markup=False,
        )
    return exits.OK
