"""``evidentia consult``: a guideline consultation with the running gateway (``POST /v1/guidelines/consult``),
turn by turn.

Interactive (no ``--say``): each line typed is what the patient says, sent as one turn; the findings so far,
the ranked differentials with what would separate them, and each planned differential's guideline plan (citing
section title paths) are printed after every turn, and the next turn continues the same consultation. A line
``/dx NAME`` gives the working diagnosis with the next turn (offline the gateway needs one); ``/quit`` or the
end of input stops. One turn without prompting: ``--say TEXT`` (repeatable, each a patient message), with
``--id`` to continue a stored consultation; ``--json`` prints the gateway's response.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from cli import exits
from cli._common import console, out, print_json, wants_json
from cli.gateway import GatewayClient, client_from_args

PATH = "/v1/guidelines/consult"
PROMPT = "patient> "


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "consult", help="Guideline consultation, turn by turn: findings, ranked differentials, a plan for each."
    )
    p.add_argument("--id", dest="consultation_id", help="Continue this stored consultation.")
    p.add_argument(
        "--say",
        action="append",
        metavar="TEXT",
        help="What the patient says (repeatable): send one turn and print it, without prompting.",
    )
    p.add_argument("--diagnosis", help="The working diagnosis (required offline unless an earlier turn gave one).")
    p.add_argument("--population", help="e.g. 'adult', 'child under 5'.")
    p.set_defaults(func=run)


def turn_body(
    said: list[str], consultation_id: str | None, diagnosis: str | None, population: str | None
) -> dict[str, Any]:
    """One turn's request: the patient's messages, with the consultation to continue and what was given."""
    body: dict[str, Any] = {"messages": [{"role": "user", "content": s} for s in said]}
    for key, value in (("consultation_id", consultation_id), ("diagnosis", diagnosis), ("population", population)):
        if value:
            body[key] = value
    return body


def _confidence(value: float | None) -> str:
    return f"{value:.2f}" if value is not None else "as given"


def print_turn(data: dict[str, Any]) -> None:
    """A turn's response for a person: findings, working diagnosis, differentials with their plans, what next."""
    out.rule(f"Consultation {data['consultation_id']}, turn {data['turn']}: {data['status']}")
    if data["findings"]:
        out.print("Findings:")
        for f in data["findings"]:
            out.print(f"  - {f['type']}: {f['text']} (turn {f['turn']}, {f['source']})", markup=False, highlight=False)
    if data.get("diagnosis_source"):
        said = f"{data['diagnosis']} ({data['diagnosis_source']}, {_confidence(data.get('confidence'))})"
        out.print(f"Working diagnosis: {said}", markup=False, highlight=False)
    if data["differentials"]:
        out.print("Differentials:")
    for d in data["differentials"]:
        state = "planned" if d["planned"] else f"not planned (below {data['plan_min_confidence']})"
        out.print(
            f"  {d['rank']}. {d['diagnosis']}: {_confidence(d['confidence'])} [{d['source']}], {state}",
            markup=False,
            highlight=False,
        )
        if d["supporting_findings"]:
            out.print(f"     supported by: {'; '.join(d['supporting_findings'])}", markup=False, highlight=False)
        if d["separating_findings"]:
            out.print(f"     to tell apart: {'; '.join(d['separating_findings'])}", markup=False, highlight=False)
        rec = d.get("recommendation")
        if rec:
            out.print(f"     best section: {rec['top_section']}", markup=False, highlight=False)
            for p in rec["plan"]:
                where = " | ".join(p["sections"])
                out.print(
                    f"     - {p['text']} [{', '.join(p['citation_ids'])}] ({where})", markup=False, highlight=False
                )
    if data["missing"]:
        out.print("Ask next: " + " ".join(data["missing"]), markup=False, highlight=False)
    for note in data["notes"]:
        out.print(f"note: {note}", style="dim", markup=False, highlight=False)
    out.print(data["disclaimer"], style="dim")


def interview(gw: GatewayClient, args: argparse.Namespace, read: Callable[[str], str] = input) -> dict[str, Any] | None:
    """The interactive loop; the last turn's response (None when no turn was sent)."""
    consultation_id, diagnosis, last = args.consultation_id, args.diagnosis, None
    console.print("Type what the patient says; /dx NAME gives the diagnosis, /quit ends.", highlight=False)
    while True:
        try:
            line = read(PROMPT).strip()
        except EOFError:
            return last
        if line in ("/quit", "/q"):
            return last
        if line.startswith("/dx "):
            diagnosis = line[4:].strip() or None
            continue
        if not line:
            continue
        body = turn_body([line], consultation_id, diagnosis, args.population if last is None else None)
        last = gw.post_json(PATH, body, what="consult")
        consultation_id, diagnosis = last["consultation_id"], None  # the gateway keeps the caller's diagnoses
        print_turn(last)


def run(args: argparse.Namespace) -> int:
    with client_from_args(args, timeout=300.0) as gw:
        if args.say:
            body = turn_body(args.say, args.consultation_id, args.diagnosis, args.population)
            data = gw.post_json(PATH, body, what="consult")
            if wants_json(args):
                print_json(data)
            else:
                print_turn(data)
                console.print(f"continue with: evidentia consult --id {data['consultation_id']} --say ...")
            return exits.OK
        last = interview(gw, args)
    if last is not None and wants_json(args):
        print_json(last)
    return exits.OK
