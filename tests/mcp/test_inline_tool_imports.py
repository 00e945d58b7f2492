"""Inline tools' imports outside the standard library are reported at manifest validation, with the line."""

import ast
import contextlib
import textwrap

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kora.core.inline_tools import is_available, unavailable_imports, unavailable_message
from kora.mcp.source import ThirdPartyImportError
from kora.resources.loader import ManifestError, load_text
from kora.resources.models import MCPServerConfig

pytestmark = pytest.mark.unit

MANIFEST = """
apiVersion: kora.dev/v1alpha1
kind: MCPServer
metadata: {name: tools}
spec:
  config:
    toolsString: |
      import json
      import requests


      def fetch(url: str) -> str:
          '''Fetch a URL.'''
          return requests.get(url).text
"""


def imports(source: str) -> list[tuple[int, str]]:
    return unavailable_imports(ast.parse(textwrap.dedent(source)))


def test_a_third_party_import_fails_manifest_validation_with_its_line():
    with pytest.raises(ManifestError) as raised:
        load_text(MANIFEST, "kora.yaml")
    message = str(raised.value)
    assert "line 2: module 'requests' is not available" in message
    assert "only the Python standard library" in message
    assert "`mcp` option" in message


def test_every_kind_of_import_statement_is_read():
    source = """
    import os, yaml.loader
    from collections import abc
    from httpx import get
    from . import sibling


    def tool() -> str:
        '''A tool importing at call time.'''
        import numpy as np
        return str(np)
    """
    assert imports(source) == [(2, "yaml.loader"), (4, "httpx"), (5, "."), (10, "numpy")]


def test_optional_and_type_checking_imports_are_allowed():
    source = """
    from typing import TYPE_CHECKING
    try:
        import orjson as fast
    except ImportError:
        fast = None
    try:
        import ujson
    except (ValueError, ModuleNotFoundError):
        pass
    if TYPE_CHECKING:
        import httpx
    else:
        import requests
    try:
        import rich
    except ValueError:
        pass
    """
    assert imports(source) == [(14, "requests"), (16, "rich")]


def test_the_tool_server_and_validation_say_the_same():
    assert str(ThirdPartyImportError("requests")) == unavailable_message("requests")
    assert is_available("json")
    assert is_available("os.path")
    assert not is_available("json", level=1)
    assert not is_available("requests")


@given(st.text())
def test_any_source_is_accepted_or_refused_with_a_value_error(source: str):
    # Surrogates, control characters, NULs: a ValueError (pydantic's ValidationError) or a valid config.
    with contextlib.suppress(ValueError):
        MCPServerConfig.model_validate({"toolsString": source})


@pytest.mark.parametrize(
    "source",
    ["-" * 100_000 + "1", "a" + ".b" * 100_000, "x = " + "1 + " * 100_000 + "1"],
    ids=["unary", "attributes", "long-sum"],
)
def test_pathological_nesting_is_a_validation_error_not_a_crash(source: str):
    with pytest.raises(ValueError, match="nested too deeply"):
        MCPServerConfig.model_validate({"toolsString": source})


def test_a_deep_tree_the_parser_accepts_is_walked_without_recursion():
    source = "import requests\nx = " + "1 + " * 2_000 + "1\n"
    assert unavailable_imports(ast.parse(source)) == [(1, "requests")]
