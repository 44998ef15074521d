"""The README stays a short entry point, and every link in it and in docs/ leads somewhere.

The README sends its reader on to docs/ for everything long; a link to a moved file or a renamed heading
would leave them stranded, so each relative link must name a file that exists and, with ``#anchor``, a
heading of that file (GitHub's anchor rule: lower case, punctuation dropped, spaces to hyphens).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = sorted([README, *(REPO / "docs").glob("*.md")])
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, only letters, digits, spaces, hyphens and underscores kept."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text())
    return {anchor(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, re.M)}


def links(path: Path) -> list[str]:
    return [m.group(1) for m in LINK.finditer(FENCE.sub("", path.read_text()))]


def test_the_readme_is_at_most_300_lines() -> None:
    assert len(README.read_text().splitlines()) <= 300


def test_the_anchor_rule() -> None:
    assert anchor("Where a new filter, source, model and workflow go") == (
        "where-a-new-filter-source-model-and-workflow-go"
    )
    assert anchor("Extending: events, services, Claude calls, schema changes") == (
        "extending-events-services-claude-calls-schema-changes"
    )


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_leads_to_a_file_and_heading(doc: Path) -> None:
    broken = []
    for target in links(doc):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        file_part, _, fragment = target.partition("#")
        path = (doc.parent / file_part).resolve() if file_part else doc
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif fragment and path.suffix == ".md" and fragment not in anchors(path):
            broken.append(f"{target}: no such heading")
    assert not broken, f"{doc.relative_to(REPO)}: {broken}"
