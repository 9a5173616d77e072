"""The documentation holds together: every relative link in README.md, ARCHITECTURE.md and
docs/*.md names a file in the repository (and a heading there, when it has an anchor),
nothing points outside the repository, every docs/ page is linked from the README, and the
README stays short and opens with its two commands."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", *sorted((ROOT / "docs").glob("*.md"))]
FIRST_COMMANDS = ["pip install -e . && specops demo", "bash .ci/run"]
README_MAX_LINES = 160

LINK = re.compile(r"!?\[[^\]]*\]\(\s*([^)\s]+)(?:\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"(`+).+?\1", re.S)


def _prose(text: str) -> str:
    """The text outside fenced blocks, with inline code spans blanked: where links can be."""
    kept, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            kept.append(line)
    return CODE_SPAN.sub(" ", "\n".join(kept))


def _links(page: Path) -> list[str]:
    return LINK.findall(_prose(page.read_text(encoding="utf-8")))


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lowercased, punctuation dropped, spaces as hyphens, -1, -2 for repeats."""
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if fenced or not re.match(r"#{1,6} ", line):
            continue
        slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else "%s-%d" % (slug, n))
    return out


def _broken(page: Path) -> list[str]:
    bad = []
    for link in _links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", link, re.I):  # http:, https:, mailto:
            continue
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.is_relative_to(ROOT):
            bad.append("%s: outside the repository" % link)
        elif not target.is_file():
            bad.append("%s: no such file" % link)
        elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
            bad.append("%s: no heading #%s in %s" % (link, anchor, target.relative_to(ROOT)))
    return bad


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_relative_links_resolve(page: Path) -> None:
    assert _broken(page) == []


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_nothing_points_outside_the_repository(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    assert "../shared" not in text
    assert "shared/DESIGN" not in text


def test_docs_pages_exist_and_each_is_linked_from_the_readme() -> None:
    docs = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    assert docs, "docs/ holds no page"
    linked = {(ROOT / link.partition("#")[0]).resolve() for link in _links(ROOT / "README.md")}
    assert [name for name in docs if (ROOT / "docs" / name).resolve() not in linked] == []


def test_readme_is_short() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES


def test_readme_opens_with_its_two_commands() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("```"))
    assert all(not line.strip() or line.startswith("# ") for line in lines[:start]), "only the title comes before it"
    assert lines[start] == "```bash"
    end = lines.index("```", start + 1)
    commands = [line.split("  #", 1)[0].strip() for line in lines[start + 1:end]]
    assert commands == FIRST_COMMANDS
