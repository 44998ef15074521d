"""``evidentia bulk``: the command is registered and its options reach the finish."""

from __future__ import annotations

import pytest

from cli import bulk
from cli.main import build_parser


def test_bulk_finish_takes_the_build_options() -> None:
    args = build_parser().parse_args(["bulk", "finish", "--workers", "3", "--maintenance-work-mem", "2GB"])
    assert args.func is bulk.run
    assert (args.action, args.workers, args.maintenance_work_mem) == ("finish", 3, "2GB")


def test_bulk_refuses_an_unknown_action() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bulk", "start"])
