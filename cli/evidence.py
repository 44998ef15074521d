"""``evidentia evidence --drug D --disease X``: the drug-disease evidence workflow through the running gateway.

Follows ``POST /v1/evidence/stream``: each step (normalise the disease, expand the searches, fetch and cache,
therapeutic search, synthesis) is shown as it runs, then the structured evidence summary is printed with the
PMIDs behind every finding.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from cli import exits
from cli._common import console, out, print_json, wants_json
from cli.gateway import GatewayError, client_from_args
from shared.citations import parse_id, scrub

STEP_TITLES = {
    "normalise": "1/5 disease name",
    "expand": "2/5 search terms",
    "fetch": "3/5 fetch and cache",
    "search": "4/5 therapeutic search",
    "synthesize": "5/5 evidence summary",
}


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("evidence", help="Drug-disease evidence: normalise, expand, fetch, search, summarise.")
    p.add_argument("--drug", required=True, help="e.g. bupropion")
    p.add_argument("--disease", required=True, help="e.g. obesity")
    p.add_argument(
        "--profile",
        type=Path,
        help="A drug profile as JSON (synonyms, target_gene_symbols, "
        "mechanisms_of_action, atc_codes, atc_descriptions, drug_type).",
    )
    p.add_argument(
        "--max-per-query", type=int, help="PMIDs taken from each search (at most the gateway's limit, its default)."
    )
    p.add_argument(
        "--no-ingest",
        action="store_true",
        help="Search only what is stored (the default for an API key without the `ingest` scope).",
    )
    p.add_argument("--wait", type=float, help="Longest wait for the ingestion jobs, in seconds.")
    p.set_defaults(func=run)


def body_of(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {"drug": args.drug, "disease": args.disease}
    if args.no_ingest:  # left out, the gateway fetches for a key with the `ingest` scope only
        body["ingest"] = False
    if args.profile:
        body["drug_profile"] = json.loads(args.profile.read_text())
    if args.max_per_query:
        body["max_per_query"] = args.max_per_query
    if args.wait is not None:
        body["wait_s"] = args.wait
    return body


def show_step(step: dict[str, Any]) -> None:
    title = STEP_TITLES.get(step["name"], step["name"])
    if step["status"] == "running":
        console.print(f"[dim]… {title}: {step['detail']}[/dim]", highlight=False)
        return
    mark = {"done": "[green]✓[/green]", "skipped": "[yellow]-[/yellow]"}.get(step["status"], "[red]✗[/red]")
    console.print(f"{mark} {title}: {step['detail']} [dim]({step.get('ms') or 0:.0f} ms)[/dim]", highlight=False)
    if step["name"] == "expand":
        for q in step.get("data", {}).get("queries", []):
            console.print(f"    [{q['axis']}] {q['query']}", markup=False, highlight=False)
    if step["name"] == "normalise":
        for note in step.get("data", {}).get("notes", []):
            console.print(f"    {note}", markup=False, highlight=False)


def print_summary(data: dict[str, Any]) -> None:
    s = data["summary"]
    # Checked by the gateway; the same citation gate runs here against the ids the response lists.
    allowed = {c["citation_id"] for c in data.get("citations") or []}
    allowed |= {parse_id(p) or p for p in s.get("supporting_pmids") or []}
    out.rule(f"Evidence: {data['drug']} for {data['disease']['search_term']} ({s['method']})")
    out.print(scrub(s["summary"], allowed)[0], markup=False, highlight=False)
    out.print(
        f"\nstrength: {s['strength']}; studies: {s['study_count']}"
        + (f" ({', '.join(s['study_types'])})" if s["study_types"] else "")
    )
    if s["key_findings"]:
        out.rule("Key findings")
        for f in s["key_findings"]:
            finding = scrub(f["finding"], allowed)[0]
            out.print(f"- {finding}  [PMID: {', '.join(f['supporting_pmids'])}]", markup=False, highlight=False)
    if data["citations"]:
        out.rule("Sources")
        for c in data["citations"]:
            where = ", ".join(str(x) for x in (c.get("journal"), c.get("year")) if x)
            out.print(
                f"[{c['number']}] {c['citation_id']}  {c['title']}" + (f" ({where})" if where else ""),
                markup=False,
                highlight=False,
            )
    out.print(f"\n{data['disclaimer']}", style="dim")


def run(args: argparse.Namespace) -> int:
    as_json = wants_json(args)
    result: dict[str, Any] | None = None
    with client_from_args(args, timeout=900.0) as gw:
        for event, data in gw.stream_events("/v1/evidence/stream", body_of(args), "evidence", timeout=900.0):
            if event == "step" and not as_json:
                show_step(data)
            elif event == "result":
                result = data
    if result is None:
        raise GatewayError("evidence: the gateway sent no result", exits.SOFTWARE)
    if as_json:
        print_json(result)
    else:
        print_summary(result)
    return exits.OK
