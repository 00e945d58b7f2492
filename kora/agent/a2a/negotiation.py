"""A2A protocol version negotiation and the errors each version reads (A2A 1.0 "Versioning";
docs/a2a.md "Versions").

* A request names its version in the ``A2A-Version`` header or the ``A2A-Version`` query parameter (the header
  wins); none means 0.3. Kora serves 1.x (answered as 1.0) and 0.3; any other version is
  :class:`VersionNotSupported` (-32009). A 0.3 method (or a legacy ``tasks/send`` name) asked for in 1.0 is
  :class:`MethodNotFound` (-32601); a 1.0 method asked for in 0.3 is the SDK's -32009.
* Errors in 0.3 mode are ``{"code", "message", "data": {"type": code} | null}`` as before; in 1.0 mode ``data``
  is the array of typed details 1.0 requires, led by a ``google.rpc.ErrorInfo`` (the SDK's own
  :func:`~a2a.utils.error_handlers.build_error_details` makes it), whose ``metadata`` carries Kora's ``type``.
"""

from __future__ import annotations

from typing import Any

from a2a.utils import constants
from a2a.utils.error_handlers import ERROR_INFO_TYPE, build_error_details
from a2a.utils.errors import JSON_RPC_ERROR_CODE_MAP, A2AError
from packaging.version import InvalidVersion, Version
from starlette.datastructures import Headers, QueryParams

from kora.core.errors import KoraError, VersionNotSupported, jsonrpc_error

V1 = constants.PROTOCOL_VERSION_1_0
V03 = constants.PROTOCOL_VERSION_0_3
#: The header and query parameter naming the version (A2A 1.0 "Versioning").
VERSION_NAME = constants.VERSION_HEADER
#: JSON-RPC code -> the SDK's A2A error class of that code (to render 1.0 errors with the SDK).
_A2A_ERRORS: dict[int, type[A2AError]] = {code: cls for cls, code in JSON_RPC_ERROR_CODE_MAP.items()}


def asked_version(headers: Headers, query: QueryParams) -> str | None:
    """The version the client named: the ``A2A-Version`` header, else the query parameter; ``None`` for neither
    (or an empty value)."""
    value = headers.get(VERSION_NAME) or query.get(VERSION_NAME)
    return value.strip() or None if value else None


def negotiate(asked: str | None) -> str:
    """The version a request is served in, :data:`V1` or :data:`V03`; raises :class:`VersionNotSupported` for
    any other (a malformed one included)."""
    if asked is None:
        return V03
    try:
        version = Version(asked)
    except InvalidVersion:
        raise VersionNotSupported(f"A2A version {asked[:40]!r} is not supported (served: 1.0, 0.3)") from None
    if version.major == 1:
        return V1
    if (version.major, version.minor) == (0, 3):
        return V03
    raise VersionNotSupported(f"A2A version {asked[:40]!r} is not supported (served: 1.0, 0.3)")


def a2a_error(error: KoraError) -> A2AError:
    """``error`` as the SDK's A2A error of its JSON-RPC code (the base ``A2AError`` for a code A2A does not name,
    such as -32000), with Kora's code as ``data.type``."""
    cls = _A2A_ERRORS.get(error.jsonrpc_code, A2AError)
    return cls(error.message, data={"type": error.code})


def error_object(error: KoraError, version: str) -> dict[str, Any]:
    """``error`` as the JSON-RPC error object a client of ``version`` reads (see the module docstring)."""
    if version != V1:
        return jsonrpc_error(error)
    # The SDK's build_error_response only renders the codes it has a response model for (not -32700, -32000);
    # its details builder takes every A2A error class (``UNKNOWN_ERROR`` for a code A2A does not name).
    details = build_error_details(a2a_error(error))
    return {"code": error.jsonrpc_code, "message": error.message, "data": details}


def error_info_entries(data: object) -> list[dict[str, Any]] | None:
    """The ``google.rpc.ErrorInfo`` entries of an SDK error's ``data`` array (``None`` when there are none)."""
    if not isinstance(data, list):
        return None
    kept = [entry for entry in data if isinstance(entry, dict) and entry.get("@type") == ERROR_INFO_TYPE]
    return kept or None
