"""The rules tests/e2e/test_doc_snippets.py relies on: every fence of the documentation names its language,
and a block left out of the runs says why."""

from pathlib import Path

import pytest

from tests.support.doc_blocks import REPO, blocks, documentation

pytestmark = pytest.mark.unit

PAGES = [*documentation(), *sorted((REPO / "examples").glob("**/README.md"))]


@pytest.mark.parametrize("page", PAGES, ids=lambda path: path.relative_to(REPO).as_posix())
def test_every_fence_names_its_language(page: Path):
    unnamed = [str(block) for block in blocks(page) if not block.language]
    assert not unnamed, f"fences without a language (python, sh, text, yaml, ...): {unnamed}"


def test_the_documentation_has_runnable_blocks_and_marked_ones():
    found = [block for page in documentation() for block in blocks(page)]
    runnable = {str(block).split(":")[0] for block in found if block.runnable and block.not_tested is None}
    assert {"README.md", "docs/local.md", "docs/a2a.md", "docs/mcp.md"} <= runnable
    assert any(block.not_tested for block in found if block.path == "README.md")


def test_the_reader_sees_language_marker_and_code(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text(
        "Intro\n\n<!-- not-tested: needs a real OpenAI key -->\n\n```python\nprint(1)\n```\n"
        "<!-- not-tested: -->\n```sh\nkora status\n```\n~~~\nplain\n~~~\n",
        encoding="utf-8",
    )
    first, second, third = blocks(page)
    assert (first.line, first.language, first.code, first.not_tested) == (
        5,
        "python",
        "print(1)\n",
        "needs a real OpenAI key",
    )
    assert first.runnable
    assert (second.language, second.code, second.not_tested) == ("sh", "kora status\n", None)  # a marker needs a reason
    assert (third.language, third.code, third.runnable) == ("", "plain\n", False)


def test_an_unclosed_fence_is_an_error(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text("```python\nprint(1)\n", encoding="utf-8")
    with pytest.raises(ValueError, match="never closed"):
        blocks(page)
