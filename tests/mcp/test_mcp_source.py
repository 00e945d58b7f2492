"""Loading toolsString: what becomes a tool, and the start-up errors for source that cannot be served."""

from __future__ import annotations

import re
import textwrap

import pytest

from kora.core.errors import ToolSourceError
from kora.mcp.source import is_supported_type, load_tools

pytestmark = pytest.mark.unit


def load(source: str):
    return load_tools(textwrap.dedent(source))


def test_public_functions_defined_in_the_source_become_tools_in_source_order():
    loaded = load(
        '''
        import json
        from math import sqrt
        from os.path import join

        LIMIT = 3

        def _helper(x):
            return x + LIMIT

        class Thing:
            def method(self) -> int:
                return 1

        square = lambda x: x * x

        def second(x: int) -> int:
            """Uses a helper and an import."""
            return _helper(int(sqrt(x)))

        def first(data: dict) -> str:
            """Dumps."""
            return json.dumps(data)

        alias = first
        '''
    )
    assert list(loaded.tools) == ["second", "first"]
    assert loaded.tools["second"].function(x=16) == 7
    assert loaded.tools["first"].function(data={"a": 1}) == '{"a": 1}'
    assert loaded.tools["second"].doc == "Uses a helper and an import."
    assert loaded.tools["second"].line == 17  # dedent keeps the leading blank line


def test_a_syntax_error_names_its_line():
    with pytest.raises(ToolSourceError, match=r"^tools source line 3: does not compile: ") as caught:
        load_tools("def ok() -> int:\n    return 1\ndef broken(:\n")
    assert caught.value.line == 3


def test_a_top_level_exception_names_its_line():
    with pytest.raises(ToolSourceError, match=r"line 2: raised ZeroDivisionError while loading: division by zero"):
        load_tools("X = 1\nY = X / 0\n")


def test_a_third_party_import_names_the_module_and_the_package_option():
    with pytest.raises(ToolSourceError) as caught:
        load_tools("import json\nimport requests\n\ndef f() -> str:\n    return ''\n")
    message = str(caught.value)
    assert caught.value.line == 2
    assert "module 'requests' is not available" in message
    assert "only the Python standard library" in message
    assert "kora mcp --package NAME" in message


def test_installed_but_non_stdlib_packages_are_refused_too():
    with pytest.raises(ToolSourceError, match="module 'pydantic' is not available"):
        load_tools("from pydantic import BaseModel\n")


def test_relative_imports_are_refused():
    with pytest.raises(ToolSourceError, match=r"module '\.helpers' is not available"):
        load_tools("from .helpers import x\n")


def test_source_without_tools_fails():
    with pytest.raises(ToolSourceError, match="defines no tool"):
        load_tools("import os\n\ndef _private() -> int:\n    return 1\n")


@pytest.mark.parametrize(
    ("signature", "message"),
    [
        ("def f(x: set) -> str:", "tool 'f' parameter 'x': type set is not supported"),
        ("def f(x: bytes) -> str:", "tool 'f' parameter 'x': type bytes is not supported"),
        ("def f(x: tuple[int, int]) -> str:", "tool 'f' parameter 'x': type tuple[int, int] is not supported"),
        ("def f(x: dict[int, str]) -> str:", "tool 'f' parameter 'x': type dict[int, str] is not supported"),
        ("def f(x) -> str:", "tool 'f' parameter 'x' has no type annotation"),
        ("def f(*items: int) -> str:", "tool 'f' parameter 'items': *args, **kwargs"),
        ("def f(x: int) -> set:", "tool 'f': return type set is not supported"),
        ("def f(x: Unknown) -> str:", "tool 'f': cannot resolve its type hints: name 'Unknown' is not defined"),
    ],
)
def test_unsupported_signatures_name_the_tool_parameter_and_line(signature, message):
    # Postponed annotations, so an unknown name is found when the hints are resolved, not while loading.
    source = f"from __future__ import annotations\n\n{signature}\n    '''Doc.'''\n    return ''\n"
    with pytest.raises(ToolSourceError, match=re.escape(message)) as caught:
        load_tools(source)
    assert caught.value.line == 3
    assert str(caught.value).startswith("tools source line 3: ")


def test_supported_types():
    from typing import Any, Literal, Optional

    old_optional = Optional[int]  # noqa: UP045 - the old spelling must work too
    supported = [str, int, float, bool, dict, list, list[str], dict[str, int], dict[str, Any], old_optional]
    supported += [int | None, list[dict[str, list[int]]], Literal["a", "b"]]
    for annotation in supported:
        assert is_supported_type(annotation), annotation
    for annotation in (set, bytes, Any, type(None), dict[int, int], tuple[int], object):
        assert not is_supported_type(annotation), annotation
    assert is_supported_type(None, is_return=True)


def test_tools_may_be_async_and_use_future_annotations():
    loaded = load(
        '''
        from __future__ import annotations
        import asyncio

        async def wait(seconds: float = 0.0) -> str | None:
            """Waits."""
            await asyncio.sleep(seconds)
            return None
        '''
    )
    assert list(loaded.tools) == ["wait"]
