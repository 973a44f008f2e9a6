"""The code blocks of README.md and docs/*.md, and how the docs tests run them
(tests/test_docs.py in the core suite, tests/integration/test_docs_integration.py
for blocks that need torch, SB3, TorchRL or Ray).

Every fenced block is run, or checked, unless the Markdown says otherwise
in HTML comments just before its fence (invisible on GitHub), one directive
each:

- ``<!-- docs-test: skip: WHY -->``: not meant to run (a template with names
  of the reader's, a CI step); WHY is required.
- ``<!-- docs-test: integration -->``: run by the integration suite.
- ``<!-- docs-test: transcript -->``: a shell transcript; each ``$ `` line is
  checked as a shell block's command is.
- ``<!-- docs-test: server -->`` / ``<!-- docs-test: client -->``: a
  ``shmatari serve`` command and the Python block that attaches to it: run
  together, the server really started (the pool's name made unique).
- ``<!-- docs-test: prelude: CODE -->``: CODE runs first (the names that the
  text around a fragment defines).
- ``<!-- docs-test: replace: OLD ==> NEW -->``: a long run made short (a step
  count), or a cluster made local; ``{tmp}`` in NEW is a scratch folder.
- ``<!-- docs-test: append: CODE -->``: CODE runs after (a function the
  block defines, called).

Python blocks run as a script in a fresh interpreter. Shell blocks are
checked, not run (they install packages or train for hours): each command
must exist and take every ``--flag`` it is given (its ``--help`` lists it),
and each pip extra must be in pyproject.toml.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"^(\s*)(`{3,})([^`\s]*)\s*$")
_DIRECTIVE = re.compile(r"^\s*<!--\s*docs-test:\s*(\w+)\s*(?::\s*(.*?))?\s*-->\s*$")
KINDS = ("skip", "integration", "transcript", "server", "client", "prelude", "replace",
         "append")
RUN_LANGUAGES = ("python", "bash", "sh", "shell")


@dataclasses.dataclass
class Block:
    path: Path
    line: int                # 1-based line of the opening fence
    language: str
    code: str
    directives: list[tuple[str, str]]

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    def has(self, kind: str) -> bool:
        return any(k == kind for k, _ in self.directives)

    def values(self, kind: str) -> list[str]:
        return [v for k, v in self.directives if k == kind]

    @property
    def suite(self) -> str:
        """"skip", "integration", or "core"."""
        if self.has("skip"):
            return "skip"
        return "integration" if self.has("integration") else "core"

    def script(self, tmp: str = "") -> str:
        """The Python this block runs: preludes, the block with its
        replacements made (each must match), the appended code."""
        code = self.code
        for rule in self.values("replace"):
            old, new = (part.strip() for part in rule.split("==>"))
            assert old in code, f"{self.id}: replace: {old!r} is not in the block"
            code = code.replace(old, new.replace("{tmp}", tmp))
        return "\n".join([*self.values("prelude"), code, *self.values("append")]) + "\n"


def blocks() -> list[Block]:
    out = []
    for path in DOCS:
        lines = path.read_text(encoding="utf-8").splitlines()
        i = 0
        while i < len(lines):
            m = _FENCE.match(lines[i])
            if not m:
                i += 1
                continue
            indent, ticks, language = m.groups()
            j = i + 1
            while j < len(lines) and lines[j].strip() != ticks:
                j += 1
            directives, k = [], i - 1
            while k >= 0 and (_DIRECTIVE.match(lines[k]) or not lines[k].strip()):
                d = _DIRECTIVE.match(lines[k])
                if d:
                    directives.insert(0, (d[1], d[2] or ""))
                k -= 1
            code = "\n".join(line[len(indent):] for line in lines[i + 1:j])
            out.append(Block(path, i + 1, language, code, directives))
            i = j + 1
    return out


def problems(block: Block) -> list[str]:
    """What is wrong with a block's directives (unknown, missing reasons, a
    block that is neither runnable nor marked)."""
    out = [f"{block.id}: unknown directive {k!r} (known: {', '.join(KINDS)})"
           for k, _ in block.directives if k not in KINDS]
    if block.has("skip") and not all(v.strip() for v in block.values("skip")):
        out.append(f"{block.id}: docs-test: skip needs a reason")
    if block.language not in RUN_LANGUAGES and not (block.has("skip") or
                                                    block.has("transcript")):
        out.append(f"{block.id}: a {block.language or 'plain'} block: mark it "
                   f"<!-- docs-test: skip: WHY --> or <!-- docs-test: transcript -->")
    return out


# -- shell commands -------------------------------------------------------------------

def commands(block: Block) -> list[list[str]]:
    """The commands of a shell block (or a transcript's ``$`` lines): each
    line without its comment, split at ``&&``, without ``VAR=value`` prefixes."""
    text = block.code
    if block.has("transcript"):
        text = "\n".join(line[2:] for line in text.splitlines() if line.startswith("$ "))
    out = []
    for line in text.splitlines():
        words = shlex.split(line, comments=True)
        while words:
            cut = words.index("&&") if "&&" in words else len(words)
            cmd = words[:cut]
            while cmd and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", cmd[0]):
                cmd = cmd[1:]
            if cmd:
                out.append(cmd)
            words = words[cut + 1:]
    return out


#: The console scripts (pyproject's [project.scripts]) as modules.
SCRIPTS = {"shmatari": "shmatari.cli", "shmatari-bench": "shmatari.bench",
           "shmatari-check": "shmatari.check"}


def flags(cmd: list[str]) -> list[str]:
    return [w.split("=", 1)[0] for w in cmd if re.fullmatch(r"--[a-z][a-z0-9-]*(=.*)?", w)]


def help_command(cmd: list[str]) -> list[str] | None:
    """The ``--help`` command line that must list ``cmd``'s flags, or None
    for a command that is checked otherwise (pip, pytest, echo)."""
    if cmd[0] in SCRIPTS:
        sub = cmd[1:2] if cmd[0] == "shmatari" and cmd[1:2] == ["serve"] else []
        return [sys.executable, "-m", SCRIPTS[cmd[0]], *sub, "--help"]
    if cmd[0] in ("python", "python3") and cmd[1:2] and cmd[1].endswith(".py"):
        return [sys.executable, str(ROOT / cmd[1]), "--help"]
    return None


def extras() -> set[str]:
    """The optional-dependency groups of pyproject.toml."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        text = (ROOT / "pyproject.toml").read_text()
        section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
        return set(re.findall(r"^([A-Za-z0-9_-]+)\s*=", section, re.M))
    with open(ROOT / "pyproject.toml", "rb") as f:
        return set(tomllib.load(f)["project"]["optional-dependencies"])


def check_other(cmd: list[str]) -> str | None:
    """Checks a command that has no ``--help`` to ask (pip, pytest, echo);
    returns what is wrong, or None."""
    if cmd[:3] in (["python3", "-m", "pip"], ["python", "-m", "pip"]) and cmd[3:4] == ["install"]:
        for arg in cmd[4:]:
            m = re.fullmatch(r"\.\[([a-z,-]+)\]", arg)
            if m and not set(m[1].split(",")) <= extras():
                return f"pip extra {m[1]!r} is not in pyproject.toml ({sorted(extras())})"
        return None
    if cmd[:3] in (["python3", "-m", "pytest"], ["python", "-m", "pytest"]):
        paths = [a for a in cmd[3:] if not a.startswith("-") and "/" in a]
        missing = [p for p in paths if not (ROOT / p).exists()]
        return f"pytest paths {missing} do not exist" if missing else None
    if cmd[0] == "echo":
        return None
    return f"no rule to check the command {shlex.join(cmd)!r}: add one to tests/docs_blocks.py"
