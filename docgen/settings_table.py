"""Write the settings table into README.md between its markers: ``python -m docgen.settings_table``."""

from __future__ import annotations

from pathlib import Path

from shared.settings import settings_markdown

START, END = "<!-- settings:start -->\n", "<!-- settings:end -->"


def update(readme: Path) -> None:
    text = readme.read_text()
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(head + START + settings_markdown() + END + tail)


if __name__ == "__main__":
    update(Path(__file__).resolve().parents[1] / "README.md")
