"""What a turn's answer must be (``response_format``, client tools) as pydantic-ai output specs.

* ``response_format`` ``json_object``: the answer must be one JSON object; ``json_schema``: one JSON value that
  validates against the schema (JSON Schema 2020-12, by ``jsonschema``). The client's ``response_format`` itself
  is sent to the model with each request (:func:`response_format_body`); the answer is checked by a pydantic-ai
  ``TextOutput`` function, so an answer that does not validate is sent back to the model with the reason
  (pydantic-ai's output retries) and, if it still fails, ends the turn with ``invalid_model_output``
  (:func:`kora.agent.loop.turn_error`). The answer is the model's text, unchanged.
* client tools: the run may also end with pydantic-ai's ``DeferredToolRequests`` (the calls the client runs).

Raises nothing itself; :func:`check_schema` raises :class:`~kora.core.errors.RequestError` for a schema that is
not a JSON schema.

``jsonschema`` (with its format checkers and bundled meta-schemas) is imported by the first request that brings a
schema, not at start: most agents never see one.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from pydantic import JsonValue
from pydantic_ai import DeferredToolRequests, ModelRetry, TextOutput

from kora.agent.turn import OutputFormat, TurnRequest
from kora.core.errors import RequestError

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator


def check_schema(schema: dict[str, JsonValue] | None, param: str) -> None:
    """Raise :class:`~kora.core.errors.RequestError` (``invalid_value`` at ``param``) when ``schema`` is not a
    valid JSON schema."""
    if schema is None:
        return
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(schema)
    except (SchemaError, RecursionError) as error:
        message = getattr(error, "message", "too deeply nested")
        raise RequestError(f"Invalid schema: {message}", code="invalid_value", param=param) from None


def response_format_body(output: OutputFormat) -> dict[str, JsonValue]:
    """The ``response_format`` sent to the model for ``output``, as the client gave it."""
    if output.kind == "json_object":
        return {"type": "json_object"}
    spec: dict[str, JsonValue] = {"name": output.name}
    if output.description is not None:
        spec["description"] = output.description
    if output.schema is not None:
        spec["schema"] = output.schema
    if output.strict is not None:
        spec["strict"] = output.strict
    return {"type": "json_schema", "json_schema": spec}


@lru_cache(maxsize=64)
def _validator(schema_json: str) -> Draft202012Validator:
    from jsonschema import Draft202012Validator

    return Draft202012Validator(json.loads(schema_json))


def _checker(output: OutputFormat) -> TextOutput[str]:
    validator = _validator(json.dumps(output.schema, sort_keys=True)) if output.schema is not None else None

    def structured_answer(text: str) -> str:
        """The model's answer when it is the JSON the request asked for; else the reason, for the model to retry."""
        try:
            value = json.loads(text)
        except ValueError as error:
            raise ModelRetry(f"Answer with JSON only: {error}") from None
        if output.kind == "json_object" and not isinstance(value, dict):
            raise ModelRetry("Answer with one JSON object.")
        if validator is not None:
            problem = next(iter(validator.iter_errors(value)), None)
            if problem is not None:
                where = "/".join(str(p) for p in problem.absolute_path) or "the answer"
                raise ModelRetry(f"The JSON does not match the schema at {where}: {problem.message}")
        return text

    return TextOutput(structured_answer)


def output_spec(turn: TurnRequest, *, deferrable: bool = False) -> Any:
    """The ``output_type`` of the turn's pydantic-ai run: None (the agent's text output) for a plain turn; with
    :class:`DeferredToolRequests` too when the turn may end with calls others run or decide (client tools, or
    ``deferrable``: calls that need a person's approval)."""
    text: Any = _checker(turn.output) if turn.output is not None else None
    if not turn.client_tools and not deferrable:
        return text
    return [text if text is not None else str, DeferredToolRequests]
