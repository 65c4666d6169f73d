"""The documentation holds together: every relative link in README.md, ARCHITECTURE.md, the model card and
docs/ (the lab notebook included, whatever files it holds) leads to a file or folder that exists, and to a
heading there when it names one; every topic page is reachable from README.md; and README.md's Quick start
still holds the blocks tests/test_readme.py runs."""

from __future__ import annotations

import re
from pathlib import Path

from tests.test_readme import README_TEXT, SETUP, quick_start_commands

REPO = Path(__file__).resolve().parent.parent
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
CODE = re.compile(r"`[^`\n]*`")


def doc_files(root: Path = REPO) -> list[Path]:
    """The Markdown files whose links are checked: the front pages and everything under docs/."""
    fronts = [root / name for name in ("README.md", "ARCHITECTURE.md", "models/README.md")]
    return [p for p in fronts if p.exists()] + sorted((root / "docs").rglob("*.md"))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings (a repeated one gets -1, -2, ... as on GitHub)."""
    seen: dict[str, int] = {}
    found = set()
    for line in FENCE.sub("", path.read_text()).splitlines():
        if m := re.match(r"#{1,6} (.*)", line):
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(path: Path) -> list[str]:
    """The link targets of a Markdown file, outside code blocks and code spans."""
    return LINK.findall(CODE.sub("", FENCE.sub("", path.read_text())))


def broken_links(files: list[Path], root: Path = REPO) -> list[str]:
    """`FILE: TARGET (why)` for each relative link that leads nowhere."""
    broken = []
    for path in files:
        for target in links(path):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
                continue
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(root)}: {target}"
            if not dest.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{where} (no heading '{anchor}' in {dest.name})")
    return broken


def test_every_relative_link_resolves():
    files = doc_files()
    assert len(files) > 20, "the test must see docs/ and the lab notebook"
    assert broken_links(files) == []


def test_a_broken_link_or_anchor_is_reported(tmp_path: Path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text(
        "# Top\n\n## Quick start\n\n[ok](docs/a.md#the-a-page) [gone](docs/missing.md) `[code](x.md)`\n"
        "[web](https://example.com) [here](#quick-start) [bad](#nowhere)\n```\n[fenced](y.md)\n```\n"
    )
    page = "# The `A` page\n\n[up](../README.md#top) [no](../README.md#top-2)\n"
    (tmp_path / "docs" / "a.md").write_text(page)
    assert broken_links(doc_files(tmp_path), tmp_path) == [
        "README.md: docs/missing.md (no such file)",
        "README.md: #nowhere (no heading 'nowhere' in README.md)",
        "docs/a.md: ../README.md#top-2 (no heading 'top-2' in README.md)",
    ]


def test_every_topic_page_is_linked_from_the_readme():
    linked = {(REPO / target.partition("#")[0]).resolve() for target in links(REPO / "README.md")}
    pages = sorted((REPO / "docs").glob("*.md")) + [REPO / "docs" / "experiments" / "README.md"]
    assert [str(p.relative_to(REPO)) for p in pages if p.resolve() not in linked] == []


def test_every_lab_notebook_entry_is_in_its_index():
    """Each dated entry is a row of the index; each folder of a run's summaries is linked by an entry."""
    notebook = REPO / "docs" / "experiments"

    def linked(pages: list[Path]) -> set[Path]:
        return {(notebook / t.partition("#")[0]).resolve() for page in pages for t in links(page)}

    index = linked([notebook / "README.md"])
    entries = sorted(p for p in notebook.glob("*.md") if p.name != "README.md")
    assert [p.name for p in entries if p.resolve() not in index] == []
    folders = [p for p in sorted(notebook.iterdir()) if p.is_dir()]
    assert [p.name for p in folders if p.resolve() not in linked(entries)] == []


def test_the_quick_start_holds_the_blocks_test_readme_runs():
    """The set-up chain with the main job, the test run and the training command, in that order, under
    the heading tests/test_readme.py reads; the README's length stays a front door's."""
    section = README_TEXT.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = [b.strip() for b in re.findall(r"```bash\n(.*?)```", section, re.S)]
    assert len(blocks) == 3, blocks
    steps = [s.strip() for s in blocks[0].split("&&")]
    assert [next(i for i, s in enumerate(steps) if s.startswith(p)) for p in SETUP] == [0, 1, 2, 4]
    assert blocks[1] == ".venv/bin/python -m pytest -q"
    assert [c.split()[0] for c in quick_start_commands()] == ["bin/selfplay", "bin/convert", "bin/train"]
    assert quick_start_commands()[-1] == blocks[2]
    assert len(README_TEXT.splitlines()) <= 200
