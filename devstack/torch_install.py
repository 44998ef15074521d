"""Install the CPU build of torch into the running interpreter's environment (``make venv`` runs it by path).

Standard library only: it runs in a bare new virtualenv, before anything else is installed. Where torch
comes from, first match wins:

1. ``--pip-args`` (``make venv TORCH_PIP_ARGS=...``): exactly those pip options with ``torch==VERSION+cpu``.
2. macOS: ``torch==VERSION`` from PyPI, where the macOS wheels are CPU (and Metal) builds and no ``+cpu``
   build exists.
3. A wheel folder (``--wheels``, default ``../shared/wheels``, or a folder in ``$PIP_FIND_LINKS``) holding
   ``torch-VERSION+cpu`` for this Python and processor: ``--find-links`` it, so no index but PyPI is needed
   (CI and this project's machines).
4. Otherwise PyTorch's CPU index (``--index-url``, default https://download.pytorch.org/whl/cpu):
   ``torch==VERSION+cpu`` with its dependencies, never the multi-GB CUDA build PyPI serves on Linux.

torch is installed alone (``--no-deps``; not with ``--pip-args``, which are taken as given): its dependencies are
pinned in requirements/dev.lock, installed next. ``--dry-run`` prints the pip command instead of running it.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# torch alone: its dependencies (filelock, sympy, networkx, jinja2, fsspec...) are pinned in the locks
# (requirements/torch-cpu-deps.in) and installed next, so nothing but torch comes from its index.
NO_DEPS = ["--no-deps"]

# platform.machine() -> the processor part of a wheel's platform tag
_WHEEL_MACHINE = {"x86_64": "x86_64", "amd64": "amd64", "aarch64": "aarch64", "arm64": "aarch64"}


@dataclass(frozen=True)
class TorchSource:
    why: str
    pip_args: list[str]


def local_cpu_wheel(wheels: Path, version: str, python: tuple[int, int], machine: str) -> Path | None:
    """A ``torch-VERSION+cpu`` wheel in ``wheels`` for this CPython and processor, if there is one."""
    if not wheels.is_dir():
        return None
    arch = _WHEEL_MACHINE.get(machine.lower(), machine.lower())
    tag = f"cp{python[0]}{python[1]}"
    for wheel in sorted(wheels.glob(f"torch-{version}+cpu-{tag}-*.whl")):
        if arch in wheel.name.lower():
            return wheel
    return None


def torch_source(
    *,
    version: str,
    system: str,
    machine: str,
    python: tuple[int, int],
    wheels: Path,
    index_url: str = CPU_INDEX,
    pip_args: str = "",
    find_links: str = "",
) -> TorchSource:
    """Where to install torch from, and the pip arguments that do it (see the module docstring).

    ``find_links`` is ``$PIP_FIND_LINKS`` (whitespace-separated; its local folders are looked in too)."""
    if pip_args.strip():
        return TorchSource("TORCH_PIP_ARGS", [*shlex.split(pip_args), f"torch=={version}+cpu"])
    if system == "Darwin":
        return TorchSource("macOS: PyPI's torch is a CPU build (no +cpu build exists)", [*NO_DEPS, f"torch=={version}"])
    for folder in [wheels, *(Path(f) for f in find_links.split() if "://" not in f)]:
        wheel = local_cpu_wheel(folder, version, python, machine)
        if wheel is not None:
            return TorchSource(f"local wheel {wheel}", [*NO_DEPS, "--find-links", str(folder), f"torch=={version}+cpu"])
    index_args = [*NO_DEPS, "--index-url", index_url, f"torch=={version}+cpu"]
    return TorchSource(f"PyTorch's CPU index {index_url}", index_args)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Install the CPU build of torch (see the module docstring).")
    p.add_argument("--version", required=True, help="torch version, e.g. 2.13.0")
    p.add_argument("--wheels", default="../shared/wheels", help="Folder that may hold torch-VERSION+cpu wheels.")
    p.add_argument("--index-url", default=CPU_INDEX, help="PyTorch's CPU wheel index.")
    p.add_argument("--pip-args", default="", help="Exact pip options instead (TORCH_PIP_ARGS).")
    p.add_argument("--dry-run", action="store_true", help="Print the pip command, install nothing.")
    args = p.parse_args(argv)
    source = torch_source(
        version=args.version,
        system=platform.system(),
        machine=platform.machine(),
        python=(sys.version_info.major, sys.version_info.minor),
        wheels=Path(args.wheels),
        index_url=args.index_url,
        pip_args=args.pip_args,
        find_links=os.environ.get("PIP_FIND_LINKS", ""),
    )
    command = [sys.executable, "-m", "pip", "install", *source.pip_args]
    print(f"torch {args.version} from {source.why}: {shlex.join(command)}", file=sys.stderr, flush=True)
    if args.dry_run:
        print(shlex.join(command))
        return 0
    status = subprocess.call(command)
    if status != 0:
        print(
            f"could not install torch {args.version} from {source.why}. Point make at a wheel folder "
            f"(TORCH_WHEELS=DIR holding torch-{args.version}+cpu-*.whl), a mirror of PyTorch's CPU index "
            "(TORCH_INDEX_URL=URL), or give pip's options yourself (TORCH_PIP_ARGS='...').",
            file=sys.stderr,
        )
    return status


if __name__ == "__main__":
    sys.exit(main())
