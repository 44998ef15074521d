"""``evidentia ask`` and ``evidentia search``: query the running gateway and print cited results."""

from __future__ import annotations

import argparse
import json
from typing import Any

from cli._common import out, post_gateway
from shared.citations import scrub
from shared.settings import get_settings


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("ask", help="Ask a question; prints the cited answer.")
    p.add_argument("question")
    p.add_argument("--top-n", type=int, default=5)
    p.add_argument("--year-from", type=int)
    p.add_argument("--year-to", type=int)
    p.add_argument("--json", action="store_true", help="Print the raw JSON response.")
    p.set_defaults(func=run)


def filters(args: argparse.Namespace) -> dict[str, Any]:
    f: dict[str, Any] = {}
    if getattr(args, "year_from", None):
        f["year_from"] = args.year_from
    if getattr(args, "year_to", None):
        f["year_to"] = args.year_to
    return f


def print_answer(data: dict[str, Any]) -> None:
    out.rule(f"Answer ({data['mode']}{', ' + data['model'] if data.get('model') else ''})")
    # The gateway has verified the answer; the same gate runs here against the citations it lists, so an older
    # or misconfigured gateway cannot make this print an id that is not among them.
    allowed = {c["citation_id"] for c in data.get("citations") or []}
    answer, _ = scrub(data["answer"], allowed)
    out.print(answer, markup=False, highlight=False)
    if data["citations"]:
        out.rule("Citations")
        for c in data["citations"]:
            where = ", ".join(str(x) for x in (c.get("journal"), c.get("year")) if x)
            out.print(
                f"[{c['number']}] {c['citation_id']}  {c['title']}" + (f" ({where})" if where else ""),
                markup=False,
                highlight=False,
            )
            if c.get("url"):
                out.print(f"    {c['url']}", markup=False, highlight=False)
    check = data.get("citation_check") or {}
    unsupported = check.get("unsupported") or []
    out.print(
        f"\ncitation check: {len(check.get('verified', []))} verified, "
        f"{len(check.get('removed', []))} removed, {len(check.get('uncited_sentences', []))} uncited sentences, "
        f"{len(unsupported)} not supported by the cited source"
        + (f" ({check['support_method']} check)" if check.get("support_method") else "")
    )
    for u in unsupported:
        ids = ", ".join(u.get("citation_ids", []))
        out.print(
            f"  ! {u['sentence']} [{ids}] (support {u['score']:.2f} < {u['threshold']:.2f})",
            markup=False,
            highlight=False,
            style="red",
        )
    out.print(f"\n{data['disclaimer']}", style="dim")


def run(args: argparse.Namespace) -> int:
    settings = get_settings()
    body = {"question": args.question, "top_n": args.top_n, "filters": filters(args)}
    data = post_gateway(settings, "/v1/ask", body)
    if data is None:
        return 1
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print_answer(data)
    return 0
