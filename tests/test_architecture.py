"""docs/architecture.md stays true: every file it names exists, and every C
header of the client is named (a new header gets its line there)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[1]
DOC = (ROOT / "docs" / "architecture.md").read_text()
NAMED = set(re.findall(r"`((?:src|csrc)/[\w/.]+)`", DOC))


def test_every_path_the_architecture_page_names_exists():
    assert len(NAMED) > 20, NAMED  # the page names the rooms by path
    missing = sorted(p for p in NAMED if not (ROOT / p).exists())
    assert not missing, f"docs/architecture.md names files that do not exist: {missing}"


def test_every_header_and_core_file_has_its_line():
    files = [*ROOT.glob("csrc/include/shmatari/*.h"), *ROOT.glob("src/shmatari/_core_*.pxi")]
    unnamed = sorted(str(f.relative_to(ROOT)) for f in files
                     if str(f.relative_to(ROOT)) not in NAMED
                     and f.name not in ("shmatari.h", "_core_fields.pxi", "_core_structs.pxi"))
    assert not unnamed, f"docs/architecture.md does not name: {unnamed}"


def test_every_docs_page_is_linked_from_the_readme():
    """docs/architecture.md was linked from nowhere (a newcomer's report)."""
    readme = (ROOT / "README.md").read_text()
    unlinked = [p.name for p in sorted((ROOT / "docs").glob("*.md"))
                if f"](docs/{p.name}" not in readme]
    assert not unlinked, f"README.md links to no docs/ page named {unlinked}"
