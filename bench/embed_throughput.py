"""Embedding throughput on real texts (issue 8).

(a) raw ``model.encode`` throughput (``SentenceTransformer.encode`` for the torch backend; the ONNX
    backend's own ``encode_passages``, which is its raw path), plus, with ``--paths``, the project's
    own batching path (``Embedder.encode_passages``) and the pre-tokenised fast path
    (``Embedder.encode_pretokenized`` on ids made beforehand, as the parser ships them).
(b) end-to-end through Kafka (``chunks.created`` -> ``chunks.embedded``): to be added by the lead in
    :func:`end_to_end_throughput` (see the marked hook below).

Usage::

    .venv/bin/python bench/embed_throughput.py --model all-MiniLM-L6-v2 -n 512 --batch-size 64
    .venv/bin/python bench/embed_throughput.py --model bge-small-en-v1.5 --paths raw,pretok --json
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from shared.embedding import get_embedder  # noqa: E402
from shared.embedding.base import Embedder  # noqa: E402

DEFAULT_CORPUS = REPO.parent / "shared" / "data" / "beir_scifact" / "corpus.jsonl.gz"
PATHS = ("raw", "service", "pretok")


def load_texts(corpus: Path, n: int) -> list[str]:
    """The first ``n`` documents of a BEIR corpus (``title`` + ``text``), as the embedder sees chunks."""
    opener = gzip.open if corpus.suffix == ".gz" else open
    texts: list[str] = []
    with opener(corpus, "rt", encoding="utf-8") as fh:
        for line in fh:
            doc = json.loads(line)
            texts.append(f"{doc.get('title', '')}\n{doc.get('text', '')}".strip())
            if len(texts) >= n:
                break
    return texts


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def _timed(fn: Callable[[], Any], n: int, device: str, repeats: int = 1) -> float:
    """Best passages/s over ``repeats`` runs of ``fn``."""
    best = 0.0
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        best = max(best, n / (time.perf_counter() - start))
    return best


def raw_throughput(embedder: Embedder, texts: Sequence[str], batch_size: int, repeats: int = 1) -> float:
    """(a) Passages/s of the model's own ``encode`` on ``texts`` (warm-up run excluded)."""
    embedder.warm_up()
    model = getattr(embedder, "model", None)
    if model is not None:  # torch backend: plain SentenceTransformer.encode

        def run() -> Any:
            return model.encode(
                list(texts), batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False
            )
    else:  # ONNX backend: its encode_passages is the raw path

        def run() -> Any:
            return embedder.encode_passages(texts, batch_size=batch_size)

    warm = list(texts[: min(len(texts), 2 * batch_size)])
    if model is not None:
        model.encode(warm, batch_size=batch_size, show_progress_bar=False)
    else:
        embedder.encode_passages(warm, batch_size=batch_size)
    return _timed(run, len(texts), embedder.device, repeats)


def service_throughput(embedder: Embedder, texts: Sequence[str], batch_size: int, repeats: int = 1) -> float:
    """Passages/s of the project's own batching path, ``Embedder.encode_passages`` (tokenisation included)."""
    embedder.encode_passages(list(texts[: 2 * batch_size]), batch_size=batch_size)
    return _timed(
        lambda: embedder.encode_passages(texts, batch_size=batch_size), len(texts), embedder.device, repeats
    )


def pretokenized_throughput(
    embedder: Embedder, texts: Sequence[str], batch_size: int, repeats: int = 1
) -> tuple[float, float]:
    """(tokenise passages/s, ``encode_pretokenized`` passages/s on those ids)."""
    start = time.perf_counter()
    ids = embedder.token_ids(texts)
    tok_rate = len(texts) / (time.perf_counter() - start)
    embedder.encode_pretokenized(ids[: 2 * batch_size], batch_size=batch_size)
    rate = _timed(
        lambda: embedder.encode_pretokenized(ids, batch_size=batch_size), len(ids), embedder.device, repeats
    )
    return tok_rate, rate


# ---------------------------------------------------------------------------------------------
# Part (b) HOOK, for the lead: end-to-end throughput of the running embedder service, from
# `chunks.created` to `chunks.embedded` through real Kafka, on the same texts and batch size.
# Add `def end_to_end_throughput(settings, texts, batch_size) -> float` here, call it from main()
# where marked, and print it with the ratio to the raw figure (target >= 0.90 on CPU).
# ---------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="all-MiniLM-L6-v2", help="Model setting (name or folder).")
    p.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="BEIR corpus.jsonl[.gz].")
    p.add_argument("-n", type=int, default=1000, help="Texts to embed (from the start of the corpus).")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--device", default="auto")
    p.add_argument(
        "--fp16", action=argparse.BooleanOptionalAction, default=None, help="Default: on CUDA only."
    )
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--repeats", type=int, default=1, help="Timed runs per path; the best is reported.")
    p.add_argument("--paths", default="raw", help=f"Comma-separated, from {','.join(PATHS)}.")
    p.add_argument("--json", action="store_true", help="Print one JSON object.")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    paths = [x.strip() for x in args.paths.split(",") if x.strip()]
    unknown = set(paths) - set(PATHS)
    if unknown:
        raise SystemExit(f"unknown --paths {sorted(unknown)}; choose from {PATHS}")
    from shared.settings import EmbeddingSettings  # pydantic: not needed by the functions above (GPU check)

    settings = EmbeddingSettings(
        model=args.model, device=args.device, batch_size=args.batch_size, fp16=args.fp16, threads=args.threads
    )
    embedder = get_embedder(settings)
    texts = load_texts(args.corpus, args.n)
    load_start = time.perf_counter()
    embedder.warm_up()
    result: dict[str, Any] = {
        "model": embedder.name,
        "backend": type(embedder).__name__,
        "device": embedder.device,
        "fp16": bool(getattr(getattr(embedder, "config", None), "fp16", False)),
        "texts": len(texts),
        "batch_size": args.batch_size,
        "load_s": round(time.perf_counter() - load_start, 2),
    }
    if "raw" in paths:
        result["raw_passages_per_s"] = round(
            raw_throughput(embedder, texts, args.batch_size, args.repeats), 1
        )
    if "service" in paths:
        result["service_passages_per_s"] = round(
            service_throughput(embedder, texts, args.batch_size, args.repeats), 1
        )
    if "pretok" in paths:
        tok, pre = pretokenized_throughput(embedder, texts, args.batch_size, args.repeats)
        result["tokenise_passages_per_s"] = round(tok, 1)
        result["pretokenized_passages_per_s"] = round(pre, 1)
    # Part (b) goes here: result["end_to_end_passages_per_s"] and result["ratio"] (see the hook above).
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>28}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
