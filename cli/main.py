"""Entry point of the ``evidentia`` console script.

Each sub-command lives in its own module of this package and exposes ``register(subparsers)``,
which adds its parser and sets ``func`` (a callable taking the parsed arguments and returning the
exit status). Modules are imported lazily so ``evidentia parse`` does not pay for Kafka or torch.

Global options, accepted before the command or after it: ``--gateway-url``, ``--api-key`` (else
``EVIDENTIA_API_KEY``), ``--json`` (machine-readable output on stdout) and ``--debug`` (tracebacks);
``--version``. Failures end with one readable line on stderr (a JSON object with ``--json``) and an exit
status from :mod:`cli.exits`, never a traceback unless ``--debug``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence

from cli import exits
from cli.gateway import API_KEY_ENV, GatewayError
from cli.version import cli_version

COMMANDS: tuple[str, ...] = (
    "settings",
    "parse",
    "ingest",
    "importer",
    "search",
    "ask",
    "models",
    "db",
    "topics",
    "dlq",
    "serve",
    "reindex",
    "bulk",
    "eval",
    "evidence",
    "consult",
    "docs",
    "demo",
)


def add_global_options(parser: argparse.ArgumentParser, *, top: bool = False) -> None:
    """The options every command takes. Below the top level their default is SUPPRESS, so a value given
    before the command is not overwritten by the sub-command's default."""
    default = None if top else argparse.SUPPRESS
    have = set(parser._option_string_actions)
    if "--gateway-url" not in have:
        parser.add_argument(
            "--gateway-url",
            metavar="URL",
            default=default,
            help="The gateway's base URL (default: $EVIDENTIA_GATEWAY_URL or http://127.0.0.1:8000).",
        )
    if "--api-key" not in have:
        parser.add_argument(
            "--api-key",
            metavar="KEY",
            default=default,
            help=f"API key sent as `Authorization: Bearer KEY` on every gateway call (default: ${API_KEY_ENV}).",
        )
    if "--json" not in have:
        parser.add_argument(
            "--json", action="store_true", default=False if top else argparse.SUPPRESS, help="Print JSON on stdout."
        )
    if "--debug" not in have:
        parser.add_argument(
            "--debug",
            action="store_true",
            default=False if top else argparse.SUPPRESS,
            help="Show tracebacks of unexpected errors.",
        )


def _all_subparsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found: list[argparse.ArgumentParser] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # aliases map to the same parser
                found.append(sub)
                found.extend(_all_subparsers(sub))
    return found


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="evidentia",
        description="Answers to medical questions from the literature, every claim cited.",
        epilog="Exit statuses: 0 ok, 1 the work failed, 2 usage, 65 request rejected, 66 not found, "
        "69 gateway unreachable, 70 internal error, 75 rate limited or timed out, 77 API key refused.",
    )
    parser.add_argument("--version", action="version", version=f"evidentia {cli_version()}")
    add_global_options(parser, top=True)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"cli.{name}":
                continue  # sub-command not built yet
            raise
        module.register(subparsers)
    for sub in _all_subparsers(parser):
        add_global_options(sub)
    return parser


def report_error(message: str, code: int, as_json: bool, extra: dict[str, object] | None = None) -> int:
    if as_json:
        print(json.dumps({"error": message, "exit_code": code, **(extra or {})}), file=sys.stderr)
    else:
        print(f"evidentia: error: {message}", file=sys.stderr)
    return code


def _is_connection_error(exc: BaseException) -> bool:
    if isinstance(exc, OSError):  # refused, unreachable, DNS: asyncpg and sockets raise these
        return True
    module = type(exc).__module__
    return module.startswith(("aiokafka", "kafka")) and "Connection" in type(exc).__name__


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return exits.USAGE
    as_json = bool(getattr(args, "json", False))
    try:
        return int(func(args) or 0)
    except KeyboardInterrupt:
        return exits.INTERRUPTED
    except GatewayError as exc:
        if args.debug:
            raise
        return report_error(exc.message, exc.exit_code, as_json, {"status": exc.status, "detail": exc.detail})
    except Exception as exc:
        if args.debug:
            raise
        text = f"{type(exc).__name__}: {exc}".rstrip(": ")
        if _is_connection_error(exc):
            return report_error(f"cannot connect: {text}", exits.UNAVAILABLE, as_json)
        return report_error(f"{text} (run with --debug for the traceback)", exits.SOFTWARE, as_json)


if __name__ == "__main__":
    sys.exit(main())
