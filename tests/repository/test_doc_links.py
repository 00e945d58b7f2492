"""Every relative link in README.md, docs/*.md and examples/**/README.md resolves inside the repository, and
no document points outside it (a clone is all a reader has)."""

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
DOCUMENTS = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md"), *(REPO / "examples").glob("**/README.md")])
#: ``[text](target)`` and ``[text]: target`` (reference definitions); images too.
LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)|^\s*\[[^\]]+\]:\s*(\S+)", re.M)
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def links(document: Path) -> list[str]:
    """The link targets of ``document``, code blocks and inline code left out (they hold examples, not links)."""
    text = FENCE.sub("", document.read_text(encoding="utf-8"))
    text = re.sub(r"`[^`\n]*`", "", text)
    return [first or second for first, second in LINK.findall(text)]


def relative(target: str) -> bool:
    return not re.match(r"^[a-z][a-z0-9+.-]*:|^#|^//", target, re.I)


def test_the_documents_are_found():
    names = {path.relative_to(REPO).as_posix() for path in DOCUMENTS}
    assert {"README.md", "docs/local.md", "examples/quickstart/README.md"} <= names


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: path.relative_to(REPO).as_posix())
def test_every_relative_link_resolves_inside_the_repository(document: Path):
    broken = []
    for target in filter(relative, links(document)):
        path = (document.parent / target.split("#", 1)[0]).resolve()
        if not path.is_relative_to(REPO) or not path.exists():
            broken.append(target)
    assert not broken, f"{document.relative_to(REPO)}: links that do not resolve in a clone: {broken}"


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: path.relative_to(REPO).as_posix())
def test_no_document_points_outside_the_repository(document: Path):
    text = document.read_text(encoding="utf-8")
    # Notes kept beside a clone (a sibling directory, a specification or design document) do not ship with it.
    outside = re.findall(r"\.\./shared|(?<![\w.])/work/|(?<![\w-])(?:spec|design)\.md", text)
    assert not outside, f"{document.relative_to(REPO)} points outside the repository: {outside}"


def test_the_link_reader_sees_inline_and_reference_links(tmp_path: Path):
    sample = tmp_path / "x.md"
    sample.write_text(
        'See [a](docs/a.md#part), [b](<b.md>), [t](c.md "title"), [web](https://x.org), [anchor](#top)'
        "and `[no](code.md)`.\n"
        "[ref]: ../up.md\n```md\n[fenced](fenced.md)\n```\n",
        encoding="utf-8",
    )
    found = links(sample)
    assert found == ["docs/a.md#part", "b.md", "c.md", "https://x.org", "#top", "../up.md"]
    assert [target for target in found if relative(target)] == ["docs/a.md#part", "b.md", "c.md", "../up.md"]
