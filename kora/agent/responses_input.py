"""A Responses request's ``input`` items checked by the Responses API's own rules, the ``openai`` package's param
types (``openai.types.responses.ResponseInputItemParam``), and translated to the Chat Completions messages they
mean (:func:`input_messages`), so that the chat rules (:mod:`kora.agent.openai_api`) then apply to the turn.

Each item is validated as the param type its ``type`` names (an item without ``type`` as one of the types whose
``type`` may be left out: a message or an item reference), strictly (``"text": 5`` is a type error, not ``"5"``)
and with no field the type does not have; ``null`` counts as not given, as on the chat endpoint, and an
``input_image`` without ``detail`` takes the API's default ``auto``. The SDK's types list their arrays as
``Iterable`` (which pydantic validates lazily, and which takes a string as an array of characters): they are
validated as lists (:func:`_listed`, the same types with ``list`` for ``Iterable``).

What an item becomes, or why it is refused (HTTP 400, OpenAI's error body, ``param`` naming the field in the
input, ``input[2].content[0].type``):

* ``message`` (the easy form, ``Message`` and an echoed output message): ``system`` / ``developer`` / ``user`` /
  ``assistant`` message; ``input_text`` and ``output_text`` parts as text parts (an ``output_text``'s
  ``annotations`` and ``logprobs`` describe a shown answer, and the model is sent its text), ``input_image`` by
  URL as an image part; ``input_file`` parts, images by ``file_id``, ``refusal`` parts, ``detail: "original"``,
  ``prompt_cache_breakpoint`` and ``phase`` are refused (Kora holds no files and its model requests take none of
  these). An item's ``id`` and ``status`` describe the item and are not sent to the model; a message's ``id`` may
  be given or left out in every message form (clients resend the items they listed with their ids, and the
  answers they got without).
* ``function_call``: an assistant tool call (consecutive calls make one assistant message); its ``kora_approval``
  marker (Kora's extension on the calls it answers) rides along. ``caller`` and ``namespace`` are refused.
* ``function_call_output``: a ``tool`` message answering ``call_id`` (required here), its output text or
  ``input_text`` parts; image and file parts, ``caller``, ``name`` and ``namespace`` are refused.
* ``reasoning``, ``item_reference`` and every item of OpenAI's hosted tools: refused (``unsupported_value`` on
  ``type``) once their shape is valid; a ``type`` the API does not define: ``invalid_value``.

Codes: ``invalid_type`` for a value of the wrong type, ``invalid_value`` for a wrong or missing value,
``unsupported_parameter`` for a field the item type does not have or Kora does not serve, ``unsupported_value``
for an item, part or value Kora does not serve. Loaded with :mod:`kora.agent.responses_answers` (the only modules
that import ``openai``); pure functions, no I/O.
"""

from __future__ import annotations

import collections.abc
import typing
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Annotated, Any, Final, Literal, NotRequired, Required, Union, get_args, get_origin

from openai.types.responses import ResponseInputItemParam
from pydantic import ConfigDict, TypeAdapter, ValidationError
from pydantic_core import ErrorDetails
from typing_extensions import TypedDict, is_typeddict

from kora.agent.responses_api import Origin
from kora.core.errors import RequestError
from kora.core.protocol import APPROVAL_FIELD

#: Strict types and no unknown field, for every type an item holds.
_CONFIG: Final = ConfigDict(strict=True, extra="forbid")
#: The item types Kora turns into chat messages.
_SERVED: Final = frozenset(
    {
        "EasyInputMessageParam",
        "Message",
        "ResponseOutputMessageParam",
        "ResponseFunctionToolCallParam",
        "FunctionCallOutput",
    }
)
#: Names pydantic gives the branches of a union of plain types in error locations (never a field of these types).
_PLAIN_BRANCHES: Final = frozenset({"str", "int", "float", "bool", "none", "list", "dict"})

#: The TypedDicts :func:`_listed` rebuilt, by the SDK's type.
_listed_types: dict[object, object] = {}


def _listed(annotation: Any) -> Any:
    """``annotation`` with ``list[X]`` wherever it has ``Iterable[X]``, TypedDicts rebuilt alike (same names, keys
    and required keys), so that pydantic validates the arrays when the item is validated."""
    if is_typeddict(annotation):
        if annotation not in _listed_types:
            hints = typing.get_type_hints(annotation, include_extras=True)
            fields = {name: _listed(hint) for name, hint in hints.items()}
            _listed_types[annotation] = TypedDict(annotation.__name__, fields, total=False)  # type: ignore[operator]
        return _listed_types[annotation]
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is collections.abc.Iterable:
        return list[_listed(args[0])]  # type: ignore[misc]
    if origin is Union:
        return Union[tuple(_listed(arg) for arg in args)]  # noqa: UP007 (a Union built from a tuple)
    if origin is Annotated:
        return Annotated[(_listed(args[0]), *annotation.__metadata__)]
    if origin in (Required, NotRequired):
        return origin[_listed(args[0])]
    if origin in (list, dict):
        return origin[tuple(_listed(arg) for arg in args)]
    return annotation


def _type_tags(member: Any) -> tuple[frozenset[str], bool]:
    """The ``type`` values an item type takes, and whether it may leave ``type`` out."""
    hint = typing.get_type_hints(member, include_extras=True)["type"]
    required = get_origin(hint) is Required
    while get_origin(hint) in (Required, NotRequired, Union, Annotated):
        hint = next(arg for arg in get_args(hint) if arg is not type(None))
    return frozenset(get_args(hint) if get_origin(hint) is Literal else ()), not required


_MEMBERS: Final[tuple[Any, ...]] = get_args(ResponseInputItemParam)
#: Item ``type`` -> the item types that take it, in the SDK's order.
_BY_TAG: Final[Mapping[str, tuple[Any, ...]]] = {
    tag: tuple(m for m in _MEMBERS if tag in _type_tags(m)[0]) for m in _MEMBERS for tag in _type_tags(m)[0]
}
#: The item types that may leave ``type`` out (a message, an item reference).
_UNTYPED: Final[tuple[Any, ...]] = tuple(m for m in _MEMBERS if _type_tags(m)[1])


@cache
def _adapter(member: Any) -> TypeAdapter[list[Any]]:
    """A validator of one-item lists of ``member`` (a list, so that the strict config applies to the TypedDicts)."""
    listed: Any = list[_listed(member)]  # type: ignore[misc]
    return TypeAdapter(listed, config=_CONFIG)


def _no_nulls(value: Any) -> Any:
    """``value`` without the object keys whose value is null (null counts as not given), ``input_image`` parts
    with the ``detail`` the API defaults to."""
    if isinstance(value, dict):
        cleaned = {key: _no_nulls(item) for key, item in value.items() if item is not None}
        if cleaned.get("type") == "input_image" and "detail" not in cleaned:
            cleaned["detail"] = "auto"
        return cleaned
    if isinstance(value, list):
        return [_no_nulls(item) for item in value]
    return value


def _is_branch(part: int | str) -> bool:
    """Whether an error location's ``part`` names a union branch (a type), not a field."""
    return isinstance(part, str) and (part in _PLAIN_BRANCHES or not part.isidentifier() or part[:1].isupper())


def _branches(location: tuple[int | str, ...]) -> list[tuple[int | str, ...]]:
    """The union branches an error location goes through, each as the location up to and with its name."""
    return [location[: i + 1] for i, part in enumerate(location) if _is_branch(part)]


def _missed(error: ErrorDetails) -> tuple[int | str, ...] | None:
    """The branch an error says does not apply (the value is not of its type, or its ``type`` tag differs)."""
    location = tuple(error["loc"])
    if location and _is_branch(location[-1]) and error["type"].endswith("_type"):
        return location
    tagged = len(location) > 1 and location[-1] == "type" and _is_branch(location[-2])
    if tagged and error["type"] in ("literal_error", "missing"):
        return location[:-1]
    return None


def _missing(param: str) -> RequestError:
    """The refusal of an item that leaves out ``param``, a field it must have."""
    return RequestError(f"Missing required parameter: '{param}'.", code="invalid_value", param=param)


def _param(base: str, location: Sequence[int | str]) -> str:
    words = [f"[{part}]" if isinstance(part, int) else f".{part}" for part in location if not _is_branch(part)]
    return base + "".join(words)


def _refusal(errors: list[ErrorDetails], base: str) -> RequestError:
    """The error that says most among pydantic's ``errors`` for one item (locations after the list index), as a
    400 naming the field under ``base`` (``input[2]``). Union branches that do not apply are set aside; when no
    branch of a union applies, the union's own place is named (its ``type`` when the branches are tagged)."""
    errors = [{**e, "loc": tuple(e["loc"])[1:]} for e in errors]
    missed = {branch for e in errors if (branch := _missed(e)) is not None}
    kept = [e for e in errors if not any(b in missed for b in _branches(tuple(e["loc"])))]
    if kept:
        error = kept[0]
        param = _param(base, error["loc"])
        kind = error["type"]
        if kind == "extra_forbidden":
            return RequestError(
                f"Unsupported parameter: '{param}' is not a field of this item.",
                code="unsupported_parameter",
                param=param,
            )
        if kind == "missing":
            return _missing(param)
        if kind.endswith("_type"):
            return RequestError(f"Invalid type for '{param}': {error['msg']}.", code="invalid_type", param=param)
        return RequestError(f"Invalid value for '{param}': {error['msg']}.", code="invalid_value", param=param)
    # Every branch of some union missed: the deepest union whose branch is not inside another missed branch.
    tops = [b for b in missed if not any(outer in missed for outer in _branches(b)[:-1])]
    where = max((b[:-1] for b in tops), key=len)
    at_union = [e for e in errors if _missed(e) is not None and _missed(e)[:-1] == where]  # type: ignore[index]
    tags = [e for e in at_union if e["loc"][-1] == "type"]
    if tags:
        param = _param(base, (*where, "type"))
        if all(e["type"] == "missing" for e in tags):
            return _missing(param)
        expected = sorted({str(e.get("ctx", {}).get("expected")) for e in tags if e["type"] == "literal_error"})
        return RequestError(
            f"Invalid value for '{param}': expected one of {', '.join(expected)}.", code="invalid_value", param=param
        )
    param = _param(base, where)
    reasons = " or ".join(dict.fromkeys(e["msg"].removeprefix("Input should be ") for e in at_union))
    return RequestError(f"Invalid type for '{param}': expected {reasons}.", code="invalid_type", param=param)


def validated_item(item: object, index: int) -> tuple[str, dict[str, Any]]:
    """Input item ``index`` validated as the SDK's param type its ``type`` names: that type's name and the item.
    Raises :class:`~kora.core.errors.RequestError` (400, ``param`` under ``input[index]``) for an item that no
    type of the Responses API takes."""
    base = f"input[{index}]"
    if not isinstance(item, dict):
        raise RequestError(f"Invalid type for '{base}': expected an object.", code="invalid_type", param=base)
    cleaned = _no_nulls(item)
    tag = cleaned.get("type")
    if tag is None and "role" in cleaned:
        # A message may leave its type out in every form, an echoed answer's included (the SDK's type for that
        # one requires it).
        tag = cleaned["type"] = "message"
    if tag is None:
        candidates = _UNTYPED
    elif not isinstance(tag, str):
        raise RequestError(
            f"Invalid type for '{base}.type': expected a string.", code="invalid_type", param=f"{base}.type"
        )
    else:
        candidates = _BY_TAG.get(tag, ())
    if not candidates:
        raise RequestError(
            f"Invalid value for '{base}.type': not an input item type of the Responses API.",
            code="invalid_value",
            param=f"{base}.type",
        )
    failures: list[list[ErrorDetails]] = []
    if len(candidates) > 1:
        # Likely types first (the SDK's order otherwise): a failed try builds pydantic's whole error report,
        # ~40 us, and clients resend every earlier answer with each turn. Likely: every field given is the type's,
        # and text parts of an answer (``output_text``) mean an echoed output message.
        keys = set(cleaned) - {"id", "status"}
        content = cleaned.get("content")
        echoed = isinstance(content, list) and any(
            isinstance(part, dict) and part.get("type") == "output_text" for part in content
        )
        candidates = tuple(
            sorted(
                candidates,
                key=lambda member: (
                    not keys <= _fields(member),
                    echoed and member.__name__ != "ResponseOutputMessageParam",
                ),
            )
        )
    for member in candidates:
        given = cleaned
        if "role" in cleaned:
            # A message's id and status describe the item, given or not, in every message form: clients resend
            # the items they listed with their ids, and the answers they got without (or, built by hand from an
            # answer's output, without a status).
            given = {name: value for name, value in cleaned.items() if name != "id"}
            fields = _fields(member)
            if "id" in fields:
                given["id"] = cleaned.get("id", "")
            if "status" in fields and "status" not in given:
                given["status"] = "completed"
        try:
            return member.__name__, _adapter(member).validate_python([given])[0]
        except ValidationError as invalid:
            failures.append(invalid.errors(include_url=False))
    # The type the item is closest to: the fewest fields it does not have, then the fewest of its fields in error
    # (the SDK's order breaks ties).
    closest = min(
        failures,
        key=lambda errors: (
            sum(1 for e in errors if e["type"] == "extra_forbidden" and len(e["loc"]) == 2),
            len({tuple(e["loc"])[1:2] for e in errors}),
        ),
    )
    raise _refusal(closest, base)


@cache
def _fields(member: Any) -> frozenset[str]:
    """The fields of item type ``member``."""
    return frozenset(typing.get_type_hints(member))


def _unsupported(message: str, param: str, code: str = "unsupported_value") -> RequestError:
    return RequestError(message, code=code, param=param)


def _refuse_fields(item: Mapping[str, Any], names: Sequence[str], base: str, why: str) -> None:
    for name in names:
        if name in item:
            raise _unsupported(
                f"Unsupported parameter: '{base}.{name}' is not supported by this agent ({why}).",
                f"{base}.{name}",
                "unsupported_parameter",
            )


def _part(part: Mapping[str, Any], param: str, images: bool) -> dict[str, Any]:
    """A content part as a Chat Completions part; ``images``: whether image parts may be given here."""
    kind = part["type"]
    _refuse_fields(part, ("prompt_cache_breakpoint",), param, "its model requests set no cache breakpoints")
    if kind in ("input_text", "output_text"):
        return {"type": "text", "text": part["text"]}
    if kind == "input_image" and images:
        _refuse_fields(part, ("file_id",), param, "it holds no files: give the image by 'image_url'")
        if "image_url" not in part:
            raise _missing(f"{param}.image_url")
        detail = part.get("detail", "auto")
        if detail == "original":
            raise _unsupported(
                f"Unsupported value: '{param}.detail' may be 'auto', 'low' or 'high' here.", f"{param}.detail"
            )
        image = {"url": part["image_url"]} | ({"detail": detail} if detail != "auto" else {})
        return {"type": "image_url", "image_url": image}
    raise _unsupported(f"Unsupported value: '{kind}' content is not supported by this agent here.", f"{param}.type")


def _message(item: Mapping[str, Any], base: str) -> dict[str, Any]:
    _refuse_fields(item, ("phase",), base, "its model requests take no message phase")
    content = item["content"]
    if not isinstance(content, str):
        images = item["role"] == "user"
        content = [_part(part, f"{base}.content[{j}]", images) for j, part in enumerate(content)]
    return {"role": item["role"], "content": content}


def input_messages(body: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[Origin]]:
    """A request's ``input`` (a string or items) and ``instructions`` as Chat Completions ``messages``, with
    where each came from (:class:`~kora.agent.responses_api.Origin`, for the chat rules' refusals to name the
    input's field). Consecutive ``function_call`` items become one assistant message with ``tool_calls``. Raises
    :class:`~kora.core.errors.RequestError` (400) without ``input`` and as the module docstring says."""
    if "input" not in body:
        raise RequestError("Missing required parameter: 'input'.", code="invalid_value", param="input")
    items, instructions = body["input"], body.get("instructions")
    messages: list[dict[str, Any]] = []
    origins: list[Origin] = []
    if instructions is not None:
        messages.append({"role": "system", "content": instructions})
        origins.append(Origin("instructions"))
    if isinstance(items, str):
        return [*messages, {"role": "user", "content": items}], [*origins, Origin("input")]
    if not isinstance(items, list):
        raise RequestError(
            "Invalid type for 'input': expected a string or an array of items.", code="invalid_type", param="input"
        )
    for index, raw in enumerate(items):
        # Kora's ``kora_approval`` marker on a function call it answered with: its extension, not the SDK type's.
        marker = raw.get(APPROVAL_FIELD) if isinstance(raw, dict) and raw.get("type") == "function_call" else None
        if marker is not None:
            raw = {name: value for name, value in raw.items() if name != APPROVAL_FIELD}
        kind, item = validated_item(raw, index)
        base = f"input[{index}]"
        if kind not in _SERVED:
            raise _unsupported(
                f"Unsupported value: '{item.get('type', 'item_reference')}' input items are not supported by this "
                "agent (its model is sent messages, function calls and their outputs).",
                f"{base}.type",
            )
        if kind == "ResponseFunctionToolCallParam":
            _refuse_fields(item, ("caller", "namespace"), base, "its function tools are the request's own")
            call: dict[str, Any] = {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": item["arguments"]},
            }
            if marker is not None:
                call[APPROVAL_FIELD] = marker
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and "tool_calls" in last and origins[-1].calls:
                last["tool_calls"].append(call)
                origins[-1] = Origin(origins[-1].param, (*origins[-1].calls, base))
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
                origins.append(Origin(base, (base,)))
        elif kind == "FunctionCallOutput":
            _refuse_fields(item, ("caller", "name", "namespace"), base, "a call is answered by its 'call_id'")
            if "call_id" not in item:
                raise _missing(f"{base}.call_id")
            output = item["output"]
            if not isinstance(output, str):
                output = [_part(part, f"{base}.output[{j}]", images=False) for j, part in enumerate(output)]
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": output})
            origins.append(Origin(base, output=True))
        else:
            messages.append(_message(item, base))
            origins.append(Origin(base))
    return messages, origins


def _build_validators() -> None:
    """Build the validators of the item types Kora serves (the others are built when first refused)."""
    for member in _MEMBERS:
        if member.__name__ in _SERVED:
            _adapter(member)


_build_validators()
