"""Cost and client-side latency per query of the Claude reranker (``hybrid+rerank`` with an API key).

The real :class:`LlmReranker` with the real ``anthropic`` SDK talks to the local fake Messages API
(``tests/fakes/anthropic_server.py``), which answers with a JSON grade for every passage. Per query it sends
``--depth`` candidates (SciFact train questions; each candidate a SciFact abstract as the reranker reads it,
``Document: title`` + text, cut at ``EVIDENTIA_RETRIEVAL_RERANK_MAX_CHARS``). Printed:

- input characters and input tokens (estimated at 4 characters a token, the fake's rule; the real
  tokenizer is not available offline) and output tokens of a full JSON reply, per query;
- the price per query and per 1,000 queries at ``--input-price`` / ``--output-price`` dollars per million
  tokens (defaults: Claude Sonnet's list price, $3 / $15);
- the client's own time per call against the fake (SDK, HTTP, JSON parsing): the part that is ours. The
  model's time to read ~10k tokens and write the grades is not measurable offline and is *added* to it.

    PYTHONPATH=. python bench/llm_rerank_cost.py --dataset ../shared/data/beir_scifact --queries 50
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from collections.abc import Sequence


async def run(dataset: str, queries: int, depth: int, max_chars: int, seed: int) -> dict[str, float]:
    import anthropic

    from evaluation.retrieval import load_beir
    from services.retriever.engine.ranking.rerank import LlmReranker
    from tests.fakes.anthropic_server import FakeAnthropic

    ds = load_beir(dataset, "train")
    rng = random.Random(seed)
    qids = rng.sample(sorted(ds.queries), min(queries, len(ds.queries)))
    doc_ids = sorted(ds.corpus)
    input_chars: list[int] = []
    output_chars: list[int] = []
    took: list[float] = []
    with FakeAnthropic() as fake:
        client = anthropic.AsyncAnthropic(base_url=fake.url, api_key="bench", max_retries=0)
        reranker = LlmReranker(client, "claude-sonnet-4-6", max_chars=max_chars)
        for qid in qids:
            # Candidates: the question's relevant abstracts plus others, as long as real candidates are.
            picked = list(ds.qrels[qid])[:depth]
            picked += rng.sample(doc_ids, depth - len(picked))
            passages = [f"Document: {ds.corpus[d][0]}\n{ds.corpus[d][1]}" for d in picked]
            reply = json.dumps([{"id": i, "score": rng.randint(0, 10)} for i in range(1, depth + 1)])
            fake.reply_text(reply)
            t = time.perf_counter()
            scores = await reranker.rerank(ds.queries[qid], passages)
            took.append((time.perf_counter() - t) * 1000)
            assert len(scores) == depth and min(scores) > -0.5, "the fake's grades were not parsed"
            input_chars.append(len(reranker.prompt(ds.queries[qid], passages)))
            output_chars.append(len(reply))
        await client.close()
    return {
        "queries": len(qids),
        "depth": depth,
        "input_chars_mean": statistics.mean(input_chars),
        "input_tokens_mean": statistics.mean(input_chars) / 4,
        "output_tokens_mean": statistics.mean(output_chars) / 4,
        "client_ms_p50": statistics.median(took),
        "client_ms_p95": sorted(took)[max(0, int(0.95 * len(took)) - 1)],
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", required=True, help="BEIR folder with a train split (SciFact).")
    p.add_argument("--queries", type=int, default=50)
    p.add_argument("--depth", type=int, default=20, help="Candidates reranked (top_k; /v1/ask's default is 20).")
    p.add_argument("--max-chars", type=int, default=1500, help="EVIDENTIA_RETRIEVAL_RERANK_MAX_CHARS.")
    p.add_argument("--input-price", type=float, default=3.0, help="Dollars per million input tokens.")
    p.add_argument("--output-price", type=float, default=15.0, help="Dollars per million output tokens.")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    r = asyncio.run(run(args.dataset, args.queries, args.depth, args.max_chars, args.seed))
    per_query = (r["input_tokens_mean"] * args.input_price + r["output_tokens_mean"] * args.output_price) / 1e6
    r["usd_per_query"] = per_query
    r["usd_per_1000_queries"] = per_query * 1000
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
