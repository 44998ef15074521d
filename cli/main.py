"""Entry point of the ``evidentia`` console script.

Each sub-command lives in its own module of this package and exposes ``register(subparsers)``,
which adds its parser and sets ``func`` (a callable taking the parsed arguments and returning the
exit status). Modules are imported lazily so ``evidentia parse`` does not pay for Kafka or torch.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

COMMANDS: tuple[str, ...] = (
    "settings",
    "parse",
    "ingest",
    "search",
    "ask",
    "models",
    "db",
    "topics",
    "dlq",
    "serve",
    "reindex",
    "eval",
    "evidence",
    "docs",
    "demo",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="evidentia", description="Answers to medical questions from the literature, every claim cited."
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"cli.{name}":
                continue  # sub-command not built yet
            raise
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        return int(func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
