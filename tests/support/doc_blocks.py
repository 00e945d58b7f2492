"""The fenced code blocks of the documentation, as the doc-snippet tests read them.

A block is runnable when its language is one a user pastes into a terminal or a Python file
(:data:`RUNNABLE`). A runnable block is run by the tests unless the line just before its opening fence is
``<!-- not-tested: REASON -->`` (the reason is required: it says why a reader cannot paste it as is, e.g.
that it needs a real OpenAI key). Every fence names its language, so no block escapes this choice.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: Languages a user pastes and runs. ``text``, ``yaml``, ``json`` ... are shown, not run.
RUNNABLE = frozenset({"python", "sh", "bash", "shell"})
NOT_TESTED = re.compile(r"^<!--\s*not-tested:\s*(?P<reason>\S.*?)\s*-->$")
FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>```+|~~~+)(?P<info>.*)$")


@dataclass(frozen=True)
class Block:
    """One fenced block: ``path`` relative to the repository, ``line`` of the opening fence (1-based),
    ``language`` (the info string's first word, ``""`` when absent), ``code`` and, when marked, why it is
    not tested."""

    path: str
    line: int
    language: str
    code: str
    not_tested: str | None

    @property
    def runnable(self) -> bool:
        """Whether a user would run it (its language is in :data:`RUNNABLE`)."""
        return self.language in RUNNABLE

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """Every fenced block of the Markdown file ``path``, in order (``ValueError`` for an unclosed fence)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        fence, start = opening["fence"], index
        previous = next((line.strip() for line in reversed(lines[:start]) if line.strip()), "")
        marker = NOT_TESTED.match(previous)
        index += 1
        body: list[str] = []
        while index < len(lines) and not lines[index].strip().startswith(fence):
            body.append(lines[index])
            index += 1
        if index == len(lines):
            raise ValueError(f"{path}:{start + 1}: the fence is never closed")
        index += 1
        found.append(
            Block(
                path=path.relative_to(REPO).as_posix() if path.is_relative_to(REPO) else str(path),
                line=start + 1,
                language=(opening["info"].split() or [""])[0].lower(),
                code="\n".join(body) + "\n",
                not_tested=marker["reason"] if marker else None,
            )
        )
    return found


def documentation() -> list[Path]:
    """README.md and docs/*.md: the pages a user follows."""
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
