"""No import cycles among the project's modules (function-level imports included): a cycle is two modules that
can only be understood, changed and tested together, and the house has none."""

from __future__ import annotations

from graphlib import CycleError, TopologicalSorter

import grimp
import pytest

PACKAGES = ("shared", "services", "cli", "devstack", "docgen", "evaluation")


def test_the_project_has_no_import_cycles() -> None:
    graph = grimp.build_graph(*PACKAGES, include_external_packages=False, cache_dir=None)
    imports = {module: graph.find_modules_directly_imported_by(module) for module in graph.modules}
    assert len(imports) > 100  # the whole project was read
    try:
        TopologicalSorter(imports).prepare()
    except CycleError as exc:
        pytest.fail(f"import cycle: {' -> '.join(exc.args[1])}")
