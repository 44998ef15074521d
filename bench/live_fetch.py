"""Live fetch benchmark: ``/v1/ask`` with ``fetch`` from a store that lacks the topic, PubMed served by the fake
E-utilities with records the store does not hold.

    .venv/bin/python bench/live_fetch.py --questions 10 --json
    .venv/bin/python bench/live_fetch.py --questions 40 --preload 60 --mode always

What runs. Kafka, PostgreSQL and the six services (``bench/ingest.py``'s :func:`pipeline_stack`, every setting
at its default, offline: no API key), and the fake E-utilities (``tests/fakes/eutils_server.py``) as NCBI.

The data. The bundled PubMedQA sample (``data/samples/pqal_dev500.json`` questions, their abstracts from
``data/samples/pubmedqa500.jsonl``), shuffled with ``--seed``: the first ``--questions`` are asked, the next
``--preload`` are ingested before the first question (a store holding other topics), the rest are distractors.
Every abstract is served by the fake only, as a ``PubmedArticle`` (title, abstract, year, MeSH). Each
question's search (the PubMed query the gateway builds offline from it: its first, unrelaxed query) answers
its own record among ``--related`` distractors, at a seeded position, as a relevance-ordered PubMed answer
would hold the best match somewhere near the top.

What it measures, per question asked one after the other (``POST /v1/ask``, ``fetch: --mode``): whether the
question's own record is among the answer's sources (the issue's figure, target >= 90 %) and among its
citations; the time to answer (wall clock, target p50 <= 20 s, fetching, parsing and embedding on the CPU
included); the fetch report (records ingested in time, pending, waited) and the answer's ``timings_ms`` (where the rest
of the time went). The CPU seconds of the stack's
processes over the questions and the load average are recorded: on a shared machine the wall clock depends on
what runs beside.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT, ROOT / "bench"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from ingest import SynthDoc, pipeline_stack, process_cpu  # noqa: E402
from load import percentile  # noqa: E402

QUESTIONS = ROOT / "data" / "samples" / "pqal_dev500.json"
RECORDS = ROOT / "data" / "samples" / "pubmedqa500.jsonl"
TARGET_OWN = 0.90
TARGET_P50_S = 20.0


def load() -> tuple[dict[str, str], dict[str, SynthDoc]]:
    """{PMID: question} and {PMID: its record}."""
    questions = {k: str(v["QUESTION"]) for k, v in json.loads(QUESTIONS.read_text()).items()}
    records: dict[str, SynthDoc] = {}
    for line in RECORDS.read_text(encoding="utf-8").split("\n"):  # not splitlines: abstracts hold U+2028
        if line.strip():
            d = json.loads(line)
            mesh = [m["descriptor"] if isinstance(m, dict) else str(m) for m in d.get("mesh") or []]
            abstract = " ".join(str(d.get("abstract") or "").split())
            records[d["pmid"]] = SynthDoc(
                d["pmid"], " ".join(d["title"].split()), [abstract], d.get("year") or 2010, mesh
            )
    return questions, records


def pubmed_xml(docs: Sequence[SynthDoc]) -> bytes:
    return (
        "<?xml version='1.0' ?>\n<PubmedArticleSet>" + "".join(d.pubmed_xml() for d in docs) + "</PubmedArticleSet>"
    ).encode()


def wait_job(http: httpx.Client, job_id: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        status: dict[str, Any] = http.get(f"/v1/ingest/{job_id}").json()
        if status["done"] or status["state"] == "failed" or time.monotonic() > deadline:
            return status
        time.sleep(0.5)


def shuffled(questions: Mapping[str, str], records: Mapping[str, object], seed: int) -> tuple[list[str], random.Random]:
    """The PMIDs with both a question and a record in the order the benchmark takes them (the first
    ``--questions`` asked, the next ``--preload`` stored first), and the generator it goes on drawing from.
    ``bench/on_topic_threshold.py`` leaves these questions and records out of its folds through this function."""
    pmids = sorted(p for p in questions if p in records)
    rng = random.Random(seed)
    rng.shuffle(pmids)
    return pmids, rng


def run(args: argparse.Namespace) -> dict[str, Any]:
    from services.gateway.livefetch.query import question_terms, relaxed_queries
    from tests.fakes.eutils_server import FakeEutils

    questions, records = load()
    pmids, rng = shuffled(questions, records, args.seed)
    asked = pmids[: args.questions]
    preload = pmids[args.questions : args.questions + args.preload]
    pool = pmids[args.questions + args.preload :]
    fake = FakeEutils(records_dir=None)
    fake.add_pubmed_records(pubmed_xml([records[p] for p in pmids]))
    searches: dict[str, list[str]] = {}
    for p in asked:
        ids = rng.sample(pool, args.related)
        ids.insert(rng.randrange(min(3, len(ids) + 1)), p)  # the best match among the first three
        query = relaxed_queries(question_terms(questions[p]))[0]
        fake.add_search(query, ids)
        searches[p] = ids
    fake.start()
    rows: list[dict[str, Any]] = []
    root = Path(args.root) if args.root else Path(tempfile.mkdtemp(prefix="evidentia-live-fetch-"))
    try:
        with (
            pipeline_stack(
                root, {"EVIDENTIA_EUTILS_BASE_URL": fake.url, **dict(e.split("=", 1) for e in args.env)}
            ) as stack,
            httpx.Client(base_url=stack.gateway_url, timeout=300) as http,
        ):
            if preload:
                job = http.post("/v1/ingest", json={"pmids": preload}).json()["job_id"]
                status = wait_job(http, job, 900)
                print(f"# preloaded {status['total']} records (done: {status['done']})", file=sys.stderr)
            cpu0 = {n: process_cpu(pid) for n, pid in stack.pids.items()}
            load0 = os.getloadavg()
            t_all = time.monotonic()
            for i, p in enumerate(asked, 1):
                t0 = time.monotonic()
                r = http.post("/v1/ask", json={"question": questions[p], "fetch": args.mode})
                elapsed = time.monotonic() - t0
                body = r.json() if r.status_code == 200 else {}
                fetch = body.get("fetch") or {}
                own = f"pubmed:{p}"
                row = {
                    "pmid": p,
                    "status": r.status_code,
                    "seconds": round(elapsed, 2),
                    "own_in_sources": own in {s["document_id"] for s in body.get("sources") or []},
                    "own_cited": f"PMID:{p}" in {c["citation_id"] for c in body.get("citations") or []},
                    "searched": fetch.get("searched"),
                    "cached": fetch.get("cached"),
                    "ingested": len(fetch.get("ingested") or []),
                    "own_ingested": own in (fetch.get("ingested") or []),
                    "pending": len(fetch.get("pending") or []),
                    "waited_ms": fetch.get("waited_ms"),
                    "reason": fetch.get("reason"),
                    "timings_ms": body.get("timings_ms"),
                }
                rows.append(row)
                print(f"# {i}/{len(asked)} {json.dumps(row)}", file=sys.stderr)
            wall = time.monotonic() - t_all
            cpu = {n: round(process_cpu(pid) - cpu0[n], 1) for n, pid in stack.pids.items()}
            load1 = os.getloadavg()
    finally:
        fake.stop()
    times = [r["seconds"] for r in rows]
    own = sum(r["own_in_sources"] for r in rows) / max(1, len(rows))
    p50 = percentile(times, 50)
    return {
        "questions": len(rows),
        "mode": args.mode,
        "preloaded": len(preload),
        "related_per_search": args.related,
        "seed": args.seed,
        "own_in_sources": round(own, 3),
        "own_cited": round(sum(r["own_cited"] for r in rows) / max(1, len(rows)), 3),
        "own_ingested_in_time": round(sum(r["own_ingested"] for r in rows) / max(1, len(rows)), 3),
        "searched": sum(bool(r["searched"]) for r in rows),
        "seconds_p50": p50,
        "seconds_p95": percentile(times, 95),
        "seconds_max": max(times, default=float("nan")),
        "wall_s": round(wall, 1),
        "cpu_s": cpu,
        "cpu_s_total": round(sum(v for v in cpu.values() if v == v), 1),
        "cpus": psutil.cpu_count(),
        "load_before": [round(x, 2) for x in load0],
        "load_after": [round(x, 2) for x in load1],
        "targets": {"own_in_sources": TARGET_OWN, "seconds_p50": TARGET_P50_S},
        "met": {"own_in_sources": own >= TARGET_OWN, "seconds_p50": p50 <= TARGET_P50_S},
        "rows": rows,
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--questions", type=int, default=10, help="Questions asked, one after the other.")
    ap.add_argument("--preload", type=int, default=30, help="Other records ingested before the first question.")
    ap.add_argument("--related", type=int, default=4, help="Distractors in each question's PubMed answer.")
    ap.add_argument("--mode", choices=["auto", "always"], default="auto", help="The requests' `fetch`.")
    ap.add_argument("--seed", type=int, default=35)
    ap.add_argument("--root", help="Folder for Kafka, PostgreSQL and the logs (default: a temporary one).")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="A setting for the services.")
    ap.add_argument("--json", action="store_true", help="Print the result as JSON.")
    args = ap.parse_args(argv)
    result = run(args)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for k, v in result.items():
            if k != "rows":
                print(f"{k}: {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
