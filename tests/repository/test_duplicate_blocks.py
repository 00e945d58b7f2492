"""At most :data:`MAX_PAIRS` pairs of places in ``kora/`` repeat a block of :data:`MIN_LINES` or more lines.

A block written twice is fixed twice, or once and then the copies disagree. Lines are compared after folding white
space; blank lines, comments, import statements, function signatures (an implementation of an abstract method
repeats its signature by design) and lines of lone punctuation (``)``, ``],``) are passed over, so a block counts
when its code is the same to the letter. A pair is two files (or two places in one file) sharing at
least one such block, however many. A block standing in more than :data:`MAX_PLACES` places is a common idiom, not
a copy, and is not counted. The failure message lists every pair, largest first, to say where to look.
"""

import ast
import io
import re
import tokenize
from collections import defaultdict
from itertools import combinations
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "kora"
#: Lines a block must have to count.
MIN_LINES = 6
#: Pairs of places the package may hold.
MAX_PAIRS = 10
#: A block in more places than this is an idiom, not a copy.
MAX_PLACES = 8

_PUNCTUATION = re.compile(r"^[\s()\[\]{},:;.]*$")
Line = tuple[str, int]  # (folded text, 1-based line number)


def code_lines(source: str) -> list[Line]:
    """The lines of ``source`` that count, comments cut and white space folded, with their line numbers."""
    skipped: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import | ast.ImportFrom):
            skipped.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):  # the signature, up to the body
            skipped.update(range(node.lineno, node.body[0].lineno))
    comment_at = {
        token.start[0]: token.start[1]
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    }
    lines = []
    for number, raw in enumerate(source.splitlines(), start=1):
        text = " ".join(raw[: comment_at.get(number, len(raw))].split())
        if number in skipped or not text or _PUNCTUATION.match(text):
            continue
        lines.append((text, number))
    return lines


def repeated_pairs(root: Path = PACKAGE, min_lines: int = MIN_LINES) -> dict[tuple[str, str], tuple[int, int, int]]:
    """``(place a, place b)`` -> ``(line in a, line in b, lines shared)`` for every pair of files (a file with itself
    when two places in it share a block) sharing a block of at least ``min_lines`` counted lines; places are
    ``kora/...`` paths, the line numbers those of the longest shared block's start."""
    files = {
        path.relative_to(root.parent).as_posix(): code_lines(path.read_text(encoding="utf-8"))
        for path in sorted(root.rglob("*.py"))
    }
    windows: dict[tuple[str, ...], list[tuple[str, int]]] = defaultdict(list)
    for name, lines in files.items():
        for start in range(len(lines) - min_lines + 1):
            windows[tuple(text for text, _ in lines[start : start + min_lines])].append((name, start))
    shared: dict[tuple[str, str], set[tuple[int, int]]] = defaultdict(set)
    for places in windows.values():
        if not 2 <= len(places) <= MAX_PLACES:
            continue
        for (name_a, a), (name_b, b) in combinations(sorted(places), 2):
            if name_a == name_b and abs(a - b) < min_lines:
                continue  # one block overlapping itself (a run of repeated lines)
            shared[(name_a, name_b)].add((a, b))
    pairs = {}
    for (name_a, name_b), starts in shared.items():
        best = (0, 0, 0)
        for a, b in starts:
            if (a - 1, b - 1) in starts:
                continue  # not the start of a run
            length = 0
            while (a + length, b + length) in starts:
                length += 1
            size = length + min_lines - 1
            if size > best[2]:
                best = (files[name_a][a][1], files[name_b][b][1], size)
        pairs[(name_a, name_b)] = best
    return pairs


def test_at_most_ten_pairs_of_places_repeat_a_block():
    pairs = repeated_pairs()
    listed = "\n".join(
        f"  {a}:{line_a} ~ {b}:{line_b} ({size} lines)"
        for (a, b), (line_a, line_b, size) in sorted(pairs.items(), key=lambda item: -item[1][2])
    )
    assert len(pairs) <= MAX_PAIRS, (
        f"{len(pairs)} pairs of places repeat {MIN_LINES}+ lines (at most {MAX_PAIRS}):\n{listed}"
    )


def test_the_check_finds_a_copied_block_and_passes_over_imports_comments_and_punctuation(tmp_path: Path):
    package = tmp_path / "kora"
    package.mkdir()
    block = "".join(f"    total = total + {n}  # step {n}\n" for n in range(6))
    (package / "a.py").write_text(f"import os\n\n\ndef f(total):\n{block}    return total\n")
    (package / "b.py").write_text(
        f"import sys\n\n\ndef g(total):\n    # the same\n{block}    return (\n        total\n    )\n"
    )
    (package / "c.py").write_text("from x import (\n    a,\n    b,\n    c,\n    d,\n    e,\n    f,\n)\n")
    (package / "d.py").write_text("from x import (\n    a,\n    b,\n    c,\n    d,\n    e,\n    f,\n)\n")
    assert repeated_pairs(package) == {("kora/a.py", "kora/b.py"): (5, 6, 6)}
