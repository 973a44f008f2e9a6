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


def test_every_benchmark_and_example_script_compiles():
    """Scripts outside the package are run by hand, not imported by a test:
    two benchmarks carried an IndentationError for a day (ef250b4's edit,
    found on 2026-12-05). Each must at least compile."""
    root = Path(__file__).resolve().parents[1]
    scripts = sorted([*root.glob("benchmarks/**/*.py"), *root.glob("examples/**/*.py")])
    assert len(scripts) > 20, scripts
    bad = []
    for path in scripts:
        try:
            compile(path.read_text(), str(path), "exec")
        except SyntaxError as exc:
            bad.append(f"{path.relative_to(root)}: {exc}")
    assert not bad, bad
