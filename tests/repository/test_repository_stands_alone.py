"""The repository stands alone: no comment, docstring, document or chart points at something a reader of a clone
does not have (a specification, a design document, an issue tracker, notes beside the clone).

A citation such as ``(spec: "Errors" item 2)`` or ``(issue 13)`` tells the reader nothing: the text says the rule
itself, or points at a document of the repository (``docs/*.md``). Kubernetes' own ``spec`` (``spec.replicas``, "Kora
sets it from the spec") is not a citation and is left alone by these patterns.
"""

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
#: What is read: code, tests, benchmarks, docs, the chart and CRDs, scripts, examples, the README.
ROOTS = ("kora", "tests", "bench", "docs", "deploy", "scripts", "examples", "README.md")
#: Third-party files kept verbatim (the Gateway API's CRDs, a recorded data set): not Kora's text.
VERBATIM = ("tests/data",)

#: Citations of documents outside the repository, each with what it catches.
CITATIONS = {
    "an issue by number": r"\bissues?\s+#?\d+",
    "an issue by name": r"\bissues?\s+\"",
    "the issue": r"\bthe\s+(?:[\w-]+\s+)?issue(?:'s)?\b",
    "a spec section": r"\bspec(?:\s+sections?)?\s*:\s*\"|\bspec\s+\"|\(spec:\s+(?:\"|the\b)|\s\(spec\)"
    r"|\bspec\s+rules?\s+\d",
    "a Spec/Design header": r"(?-i:\b(?:Spec|Design)(?:\s+sections?)?:)",
    "a design section": r"\bdesign\s*:?\s+\"",
    "an item or rule by number": r"\b(?:items?|rules?)\s+\d+(?:\s*-\s*\d+)?\b(?!\s+of\s+the\s+(?:module\s+)?docstring)",
    "a private document": r"\b(?:spec|design)\.md\b|stack[- ]notes|\.\./shared",
}
PATTERNS = {kind: re.compile(pattern, re.I) for kind, pattern in CITATIONS.items()}


def files() -> list[Path]:
    """The text files under :data:`ROOTS`, this test and :data:`VERBATIM` left out."""
    found: list[Path] = []
    for root in ROOTS:
        path = REPO / root
        for candidate in [path] if path.is_file() else sorted(path.rglob("*")):
            relative = candidate.relative_to(REPO).as_posix()
            if (
                candidate.is_file()
                and "__pycache__" not in candidate.parts
                and candidate != Path(__file__).resolve()
                and not relative.startswith(VERBATIM)
            ):
                found.append(candidate)
    return found


def citations(text: str) -> list[tuple[int, str, str]]:
    """``(line number, kind, line)`` of each line of ``text`` that cites something outside the repository, ``kind``
    naming the first pattern of :data:`CITATIONS` it matches. A citation wrapped onto the next line (``issue`` at
    the end of one, ``"Name"`` at the start of the next) counts on the line it starts on."""
    lines = text.splitlines()
    found = []
    for number, line in enumerate(lines, 1):
        following = lines[number].lstrip() if number < len(lines) else ""
        joined = f"{line} {following}"
        starts = ((kind, [m.start() for m in pattern.finditer(joined)]) for kind, pattern in PATTERNS.items())
        kind = next((kind for kind, at in starts if any(start < len(line) for start in at)), None)
        if kind is not None:
            found.append((number, kind, line.strip()))
    return found


def test_the_files_are_found():
    names = {path.relative_to(REPO).as_posix() for path in files()}
    assert {"README.md", "kora/core/errors.py", "docs/memory.md", "deploy/helm/kora/values.yaml"} <= names
    assert not any(name.startswith("tests/data/") for name in names)


def test_nothing_points_outside_the_repository():
    found = []
    for path in files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        found += [f"{path.relative_to(REPO)}:{number}: ({kind}) {line}" for number, kind, line in citations(text)]
    assert not found, (
        f"{len(found)} line(s) cite a document a reader of the repository does not have (a spec, design document, "
        "issue or item number); say the rule itself, or point at docs/*.md:\n" + "\n".join(found)
    )


@pytest.mark.parametrize(
    "line",
    [
        '"""Turns of one agent (spec: "Errors", "Limits").',
        "# covers the foundation of issue 13",
        'Fault drills (issue "Hardening"): each fault',
        '(spec "Resource phases")',
        'Spec sections: "Gateway routes"',
        "Spec: the MemoryStore paragraph",
        'Design: "Wiring ... a pure function"',
        'graph (design "Runners")',
        "# Identity and model (spec).",
        "the Streamable HTTP endpoint (spec rule 3).",
        '"Versioning" item 1',
        '"Events" rules 1-2',
        "the issue's 4-7 s",
        "The named cases of the hardening issue",
        "beside the clone (../shared/spec.md, design.md, stack-notes.md)",
    ],
)
def test_a_citation_is_caught(line: str):
    assert [(number, text) for number, _, text in citations(line)] == [(1, line)]


def test_a_citation_wrapped_onto_the_next_line_is_caught_where_it_starts():
    text = 'recorded where each span is made (docs/telemetry.md, issue\n"OpenTelemetry": metrics over OTLP).'
    assert [(number, kind) for number, kind, _ in citations(text)] == [(1, "an issue by name")]


@pytest.mark.parametrize(
    "line",
    [
        "Extra environment variables; names Kora sets from the spec are rejected.",
        "replicas = resource.spec.replicas",
        "spec: {mode: Scripted, gatewayRoute: {timeout: 7s}}",
        "def model_api(spec: dict) -> dict:",
        "auth_jwt_issuer: str = Field(",
        "the answer is checked by the Agent's output spec",
        'SPEC_HASH_ANNOTATION = "kora.dev/spec-hash"',
        "a design that keeps one lock",
        "build(spec) and %(spec)s",
        "(rule 1 of the module docstring)",
    ],
)
def test_kubernetes_spec_and_ordinary_words_are_not_citations(line: str):
    assert citations(line) == []
