"""Per-parameter descriptions from Google, NumPy and Sphinx docstrings; the signature the SDK reads."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from kora.mcp.schema import add_parameter_descriptions, parameter_descriptions, schema_signature

pytestmark = pytest.mark.unit

GOOGLE = """Look up the weather.

Args:
    city: The city name,
        in English.
    days (int): How many days ahead.

Returns:
    A forecast.
"""

NUMPY = """Look up the weather.

Parameters
----------
city : str
    The city name.
days : int
    How many days ahead.
"""

SPHINX = """Look up the weather.

:param city: The city name.
:param int days: How many days ahead.
:returns: a forecast
"""


def test_each_docstring_style_gives_parameter_descriptions():
    names = ["city", "days"]
    assert parameter_descriptions(GOOGLE, names) == {
        "city": "The city name, in English.",
        "days": "How many days ahead.",
    }
    assert parameter_descriptions(NUMPY, names) == {"city": "The city name.", "days": "How many days ahead."}
    assert parameter_descriptions(SPHINX, names) == {"city": "The city name.", "days": "How many days ahead."}


def test_docstrings_without_parameters_and_unknown_names_give_nothing():
    assert parameter_descriptions("", ["city"]) == {}
    assert parameter_descriptions("Just a summary.", ["city"]) == {}
    assert parameter_descriptions(GOOGLE, ["country"]) == {}


def test_schema_signature_resolves_hints_and_widens_bare_containers():
    def tool(data: "dict", limit: "int" = 3) -> "dict":  # noqa: UP037 - string hints on purpose
        return data

    signature = schema_signature(tool)
    assert signature.parameters["data"].annotation is dict
    assert signature.parameters["limit"].default == 3
    assert signature.return_annotation == dict[str, Any]

    def listing() -> list:
        return []

    def untyped_return(x: int):
        return x

    assert schema_signature(listing).return_annotation == list[Any]
    assert schema_signature(untyped_return).return_annotation is inspect.Signature.empty


def test_descriptions_are_added_to_existing_properties_only():
    schema: dict[str, Any] = {"type": "object", "properties": {"city": {"type": "string"}}}
    add_parameter_descriptions(schema, {"city": "Where.", "ghost": "Nothing."})
    assert schema["properties"] == {"city": {"type": "string", "description": "Where."}}
