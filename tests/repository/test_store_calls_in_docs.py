"""A memory store's API is private by default (tests/e2e/test_kora_up.py: a request without its admin token is
answered 401): every ``curl`` of it that the documentation and the examples show sends the token."""

import re
from pathlib import Path

import pytest

from tests.support.doc_blocks import REPO, documentation

pytestmark = pytest.mark.unit

PAGES = [*documentation(), *sorted((REPO / "examples").glob("**/*.md")), *sorted((REPO / "examples").glob("**/*.yaml"))]
#: A curl command whose URL is a memory store's, through the gateway (``/<namespace>/memorystore/<name>/...``).
STORE_CURL = re.compile(r"curl\b[^`\n]*/memorystore/[^`\s]+")


def store_curls(page: Path) -> list[str]:
    return STORE_CURL.findall(page.read_text(encoding="utf-8"))


@pytest.mark.parametrize("page", PAGES, ids=lambda path: path.relative_to(REPO).as_posix())
def test_every_curl_of_a_memory_store_sends_its_token(page: Path):
    without = [command for command in store_curls(page) if "Authorization: Bearer $(kora token" not in command]
    assert not without, f"{page.relative_to(REPO)}: curl of a memory store without its token: {without}"


def test_the_memory_example_shows_its_store_call():
    shown = store_curls(REPO / "examples" / "memory" / "README.md")
    assert shown, "examples/memory/README.md shows no curl of its store"
