"""``evidentia ask``: ask the running gateway a question; the answer streams in, then the verified answer.

By default the question goes to ``POST /v1/ask/stream``: the model's tokens are shown as they arrive (on
stderr, so stdout carries only the result), then the verified answer (citations checked, numbered) with its
reference list is printed on stdout. ``--no-stream`` uses ``POST /v1/ask`` and waits for the whole answer.
``--json`` prints one JSON object (the answer, citations, citation check, summary, metrics). ``--fetch``
(auto, always, never) decides whether PubMed is searched at question time; its progress is shown as it runs
and what it did is printed with the answer.
"""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any, get_args

from rich.console import Console

from cli import exits
from cli._common import out, print_json, wants_json
from cli.gateway import GatewayError, client_from_args
from shared.citations import scrub
from shared.models import CliFlag, SearchFilters


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("ask", help="Ask a question; streams the answer, then prints it verified and cited.")
    p.add_argument("question")
    p.add_argument("--top-n", type=int, default=5)
    add_filter_flags(p)
    p.add_argument(
        "--language", metavar="CODE", help="Your language, ISO 639-1 (e.g. fr): with an API key the answer is in it."
    )
    p.add_argument(
        "--source",
        action="append",
        choices=["pubmed", "pmc", "bookshelf", "guidelines", "clinicaltrials", "fda_label"],
        help="Search only this source (repeatable; guidelines = bookshelf). Default: every source.",
    )
    p.add_argument(
        "--min-evidence-level",
        type=int,
        choices=range(1, 6),
        metavar="1-5",
        help="Only sources of at least this evidence level, 1 (systematic review, meta-analysis) .. 5 (everything).",
    )
    p.add_argument(
        "--fetch",
        choices=["auto", "always", "never"],
        help="Search PubMed at question time: auto (the gateway's default for a key with the ingest scope) when "
        "the store has fewer than 3 relevant sources, always, or never (the store only).",
    )
    p.add_argument("--conversation", metavar="ID", help="Continue a conversation (its id from an earlier answer).")
    p.add_argument("--no-stream", action="store_true", help="Wait for the whole answer (POST /v1/ask).")
    p.add_argument("--timeout", type=float, default=300.0, help="Longest wait for the answer, in seconds.")
    p.set_defaults(func=run)


def _filter_flags() -> list[tuple[str, CliFlag, type]]:
    """The :class:`SearchFilters` fields with a CLI option: (field, its flag, the option's type)."""
    out = []
    for name, field in SearchFilters.model_fields.items():
        for flag in (m for m in field.metadata if isinstance(m, CliFlag)):
            kind = next(t for t in get_args(field.annotation) or (field.annotation,) if t is not type(None))
            out.append((name, flag, kind))
    return out


def add_filter_flags(p: argparse.ArgumentParser) -> None:
    """The search filters' options (:class:`~shared.models.CliFlag` on their fields)."""
    for name, flag, kind in _filter_flags():
        p.add_argument(flag.flag, dest=name, type=kind, metavar=flag.metavar, help=flag.help)


def filters(args: argparse.Namespace) -> dict[str, Any]:
    """The request's filters: each filter option given (0 is a value too)."""
    return {name: getattr(args, name) for name, _, _ in _filter_flags() if getattr(args, name, None) is not None}


def citation_metrics_text(c: dict[str, Any]) -> str:
    """A source's iCite metrics as the CLI prints them ("cited 250x, NIH percentile 95.3"); "" without."""
    m = c.get("citation_metrics") or {}
    parts = []
    if m.get("citation_count") is not None:
        parts.append(f"cited {m['citation_count']}x")
    if m.get("nih_percentile") is not None:
        parts.append(f"NIH percentile {m['nih_percentile']}")
    return ", ".join(parts)


def model_usage(data: dict[str, Any]) -> str:
    """One line on the Claude calls of the answer (``/v1/ask``'s fields, or the stream's ``metrics``); "" if none."""
    metrics = data.get("metrics") or {}
    calls = data.get("llm_calls") or metrics.get("llm_calls") or []
    used = data.get("tokens_used") or metrics.get("tokens_used") or {}
    if not calls:
        return ""
    by_model = ", ".join(f"{m} x{n}" for m, n in Counter(c["model"] for c in calls).items())
    return (
        f"model calls: {len(calls)} ({by_model}); tokens: {used.get('input_tokens', 0)} in, "
        f"{used.get('output_tokens', 0)} out, {used.get('cache_read_input_tokens', 0)} cache read, "
        f"{used.get('cache_creation_input_tokens', 0)} cache write"
    )


def intelligence_line(data: dict[str, Any]) -> str:
    """One line on how the question was understood (``query_intelligence``): class, language, what was searched
    and the route taken; "" from a gateway that does not report it."""
    qi = data.get("query_intelligence") or {}
    if not qi:
        return ""
    c, lang = qi.get("classification") or {}, qi.get("language") or {}
    parts = [f"question: {c.get('category')} ({c.get('method')})", f"language: {lang.get('code')}"]
    if qi.get("translated"):
        parts.append(f"searched in English: {qi.get('searched_query')!r}")
    if data.get("answer_language"):
        parts.append(f"answer in: {data['answer_language']}")
    return "; ".join(parts) + "".join(f"\n  {step}" for step in qi.get("route") or [])


def fetch_line(report: dict[str, Any] | None) -> str:
    """One line on the question's PubMed search (the response's ``fetch``); "" from a gateway without it."""
    if not report:
        return ""
    if not report.get("searched"):
        return f"PubMed ({report.get('mode')}): not searched" + (
            f": {report['reason']}" if report.get("reason") else ""
        )
    parts = [
        f"PubMed ({report.get('mode')}{', cached search' if report.get('cached') else ''}): {report.get('query')!r} "
        f"found {report.get('found', 0)}",
        f"{len(report.get('ingested') or [])} fetched and searched",
        f"{len(report.get('pending') or [])} still on their way",
        f"{report.get('waited_ms', 0) / 1000:.1f} s",
    ]
    return "; ".join(parts) + (f" (job {report['job_id']})" if report.get("job_id") else "")


def fetch_progress(data: dict[str, Any]) -> str:
    """A stream ``fetch`` event as one line of progress."""
    stage = data.get("stage")
    if stage == "searching":
        return f"searching PubMed: {data.get('query')!r}"
    if stage == "found":
        return f"found {data.get('found', 0)} in PubMed; fetching {data.get('new', 0)} new"
    if stage == "embedded":
        return f"embedded {data.get('embedded', 0)} of {data.get('of', 0)}"
    if stage == "unavailable":
        return f"PubMed unavailable: {data.get('reason')}"
    return ""


def agreement_line(data: dict[str, Any]) -> str:
    """How the cited sources stand to the main finding ("sources disagree: 2 supports, 1 contradicts"), or why
    they are not labelled; "" when the answer has no agreement (an emergency, no answer)."""
    agreement = data.get("agreement")
    if not agreement:
        return ""
    if not agreement.get("labels"):
        return f"agreement: not labelled ({agreement.get('reason') or agreement.get('status')})"
    counts = agreement.get("counts") or {}
    shown = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in counts.items() if n)
    return f"agreement: sources {'disagree' if agreement.get('disagree') else 'agree'}: {shown}"


def print_answer(data: dict[str, Any]) -> None:
    """The verified answer: numbered as its citations, with the reference list and the citation check."""
    out.rule(f"Answer ({data['mode']}{', ' + data['model'] if data.get('model') else ''})")
    # The gateway has verified the answer; the same gate runs here against the citations it lists, so an older
    # or misconfigured gateway cannot make this print an id that is not among them.
    allowed = {c["citation_id"] for c in data.get("citations") or []}
    answer, _ = scrub(data.get("numbered_answer") or data["answer"], allowed)
    out.print(answer, markup=False, highlight=False)
    if data["citations"]:
        out.rule("Citations")
        for c in data["citations"]:
            where = ", ".join(str(x) for x in (c.get("journal"), c.get("year"), citation_metrics_text(c)) if x)
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
    agreement = agreement_line(data)
    if agreement:
        out.print(agreement, style="red" if (data.get("agreement") or {}).get("disagree") else None, markup=False)
    understood = intelligence_line(data)
    if understood:
        out.print(understood, style="dim", markup=False, highlight=False)
    fetched = fetch_line(data.get("fetch"))
    if fetched:
        out.print(fetched, style="dim", markup=False, highlight=False)
    usage = model_usage(data)
    if usage:
        out.print(usage, style="dim")
    if data.get("conversation_id"):
        out.print(f"conversation: {data['conversation_id']} (continue with --conversation)", style="dim")
    out.print(f"\n{data['disclaimer']}", style="dim")


def stream_answer(args: argparse.Namespace, body: dict[str, Any], show_tokens: bool) -> dict[str, Any]:
    """Follow ``/v1/ask/stream``; tokens go to stderr as they come; returns the final answer's fields."""
    live = Console(stderr=True, highlight=False)
    result: dict[str, Any] = {}
    tokens = 0
    with client_from_args(args, timeout=args.timeout) as gw:
        for event, data in gw.stream_events("/v1/ask/stream", body, "ask", timeout=args.timeout):
            if event == "fetch":
                line = fetch_progress(data)
                if show_tokens and line:
                    live.print(line, style="dim", markup=False, highlight=False)
            elif event == "retrieval_done":
                result["sources"] = data.get("sources", [])
                result["fetch"] = data.get("fetch")
                if show_tokens:
                    live.print(f"[dim]{data.get('count', 0)} passages retrieved; answering…[/dim]")
            elif event == "token":
                tokens += 1
                if show_tokens:
                    live.file.write(data["text"])
                    live.file.flush()
            elif event == "citations":
                result.update(data)
            elif event == "summary":
                result["summary"] = data
            elif event == "metrics":
                result["metrics"] = data
            elif event == "done":
                break
    if show_tokens and tokens:
        live.file.write("\n")
        live.file.flush()
    if "answer" not in result:
        raise GatewayError("ask: the stream ended without an answer", exits.SOFTWARE)
    return result


def run(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"question": args.question, "top_n": args.top_n, "filters": filters(args)}
    if args.conversation:
        body["conversation_id"] = args.conversation
    if args.language:
        body["language"] = args.language
    if args.source:
        body["source_types"] = args.source
    if args.min_evidence_level is not None:
        body["min_evidence_level"] = args.min_evidence_level
    if args.fetch:
        body["fetch"] = args.fetch
    as_json = wants_json(args)
    if args.no_stream:
        with client_from_args(args, timeout=args.timeout) as gw:
            data: dict[str, Any] = gw.post_json("/v1/ask", body, what="ask")
    else:
        data = stream_answer(args, body, show_tokens=not as_json)
    if as_json:
        print_json(data)
    else:
        print_answer(data)
    return exits.OK
