"""Kora's one error tree: every boundary's error body and code comes from here.

Each kind of error carries, as class attributes, how every boundary reports it:

* ``status``: the HTTP status (agent ``/v1`` and probes, the memory endpoints);
* ``openai_type`` and ``code``: the ``type`` and ``code`` of OpenAI's error body on ``/v1``; ``code`` is also the
  ``error_type`` of the ``error`` memory event a failed turn stores;
* ``jsonrpc_code``: the JSON-RPC 2.0 error code on ``POST /``.

An instance may narrow ``code`` (``RequestError("...", code="no_user_message")``) and name the request field it
is about (``param="temperature"``: OpenAI's ``error.param``). Boundaries map an error
with one function each: :func:`kora.core.openai_wire.error_body` (``/v1``) and :func:`jsonrpc_error`
(JSON-RPC on ``POST /``). Tools do not raise these: they return ``Error: ...`` text to the model, which
decides what to do next.

::

    KoraError                     500 server_error           internal_error       -32603
    ├── RequestError              400 invalid_request_error  invalid_request      -32602   the client's mistake
    │   ├── InvalidJSON           400 invalid_request_error  invalid_json         -32700   the body is not JSON
    │   ├── InvalidRPCRequest     400 invalid_request_error  invalid_rpc_request  -32600   a bad JSON-RPC envelope
    │   ├── PayloadTooLarge       413 invalid_request_error  payload_too_large    -32600   body over the size limit
    │   ├── Forbidden             403 permission_error       forbidden            -32602   beyond what it may read
    │   │   └── ForbiddenOrigin   403 permission_error       forbidden_origin     -32600   an Origin not allowed (MCP)
    │   ├── MethodNotFound        400 invalid_request_error  method_not_found     -32601   no such JSON-RPC method
    │   ├── VersionNotSupported   400 invalid_request_error  version_not_supported  -32009   (A2A)
    │   ├── ContentTypeNotSupported  400 invalid_request_error  content_type_not_supported  -32005   (A2A)
    │   └── NotFound              404 not_found_error        not_found            -32602   no such session
    ├── Unauthenticated           401 invalid_request_error  invalid_token        -32000   a bearer token that fails
    ├── Unavailable               503 service_unavailable    unavailable          -32603   starting, failed to start
    └── TurnError                 500 server_error           internal_error       -32603   a turn could not finish
        ├── ModelError            502 server_error           model_error          -32603   the model API failed
        │   └── ModelTimeout      504 timeout                model_timeout        -32603   ... or did not answer in time
        ├── StepLimitReached      200 -                      step_limit           -        finish_reason length
        │   └── BudgetExhausted   200 -                      budget_exhausted     -        ... a turn budget ran out
        └── TurnCancelled         499 -                      cancelled            -        the client went away

Below the tree, the errors a component raises and handles itself (a settings error that ends a CLI, a memory job
to retry, a manifest error, a scripted model's script error, ...): every exception class of Kora is defined in
this module, except the few a library's protocol requires elsewhere (a ``KeyError`` from a mapping, an
``ImportError`` from an import hook).

Imports nothing but the standard library, so every layer may raise these.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from typing import ClassVar

_log = logging.getLogger("kora")


class KoraError(Exception):
    """Base of every error Kora reports to a client. ``message`` is written for the client to read."""

    status: ClassVar[int] = 500
    openai_type: ClassVar[str] = "server_error"
    default_code: ClassVar[str] = "internal_error"
    jsonrpc_code: ClassVar[int] = -32603

    def __init__(self, message: str, *, code: str | None = None, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        #: The error's code (OpenAI ``code``, stored ``error_type``): the class's, unless narrowed.
        self.code = code or self.default_code
        #: The request field the error is about, dotted (OpenAI ``param``, e.g. ``messages.2.content``), if any.
        self.param = param


class RequestError(KoraError):
    """The request is malformed or asks for something the server cannot do (HTTP 400)."""

    status = 400
    openai_type = "invalid_request_error"
    default_code = "invalid_request"
    jsonrpc_code = -32602


class InvalidJSON(RequestError):
    """The request body is not JSON (or not UTF-8): JSON-RPC's parse error."""

    default_code = "invalid_json"
    jsonrpc_code = -32700


class InvalidRPCRequest(RequestError):
    """A JSON-RPC envelope that is not a valid request object (``jsonrpc``, ``method``, ``id``), or an empty batch."""

    default_code = "invalid_rpc_request"
    jsonrpc_code = -32600


class PayloadTooLarge(RequestError):
    """The request body is larger than the workload's limit (``*_MAX_REQUEST_BYTES``): HTTP 413, refused before
    the body is read further (:mod:`kora.core.limits`)."""

    status = 413
    default_code = "payload_too_large"
    jsonrpc_code = -32600


class Forbidden(RequestError):
    """The request asks for more than its caller may have, e.g. a memory scope above the store's ceiling (HTTP 403)."""

    status = 403
    openai_type = "permission_error"
    default_code = "forbidden"


class NotFound(RequestError):
    """The request names something that does not exist, e.g. an unknown session (HTTP 404)."""

    status = 404
    openai_type = "not_found_error"
    default_code = "not_found"


class Unauthenticated(KoraError):
    """The request sent a credential that does not verify (a bearer token that is malformed, expired, wrongly
    signed or for another issuer or audience): HTTP 401. A request without a credential is not this error: it is
    anonymous. JSON-RPC has no code for it, so it takes -32000, the first implementation-defined server error,
    which A2A leaves unused; the HTTP status says the rest."""

    status = 401
    openai_type = "invalid_request_error"
    default_code = "invalid_token"
    jsonrpc_code = -32000


class AuthenticationRequired(KoraError):
    """The request is anonymous where only a verified user is served (A2A's extended agent card): HTTP 401. It
    takes JSON-RPC -32000 as :class:`Unauthenticated` does; in the REST binding it is ``UNAUTHENTICATED``."""

    status = 401
    openai_type = "invalid_request_error"
    default_code = "authentication_required"
    jsonrpc_code = -32000


class Unavailable(KoraError):
    """The server cannot serve yet or at all: still starting, or its runtime failed to start (HTTP 503)."""

    status = 503
    openai_type = "service_unavailable"
    default_code = "unavailable"


class TurnError(KoraError):
    """A turn that could not produce an answer. When raised to a protocol, the turn's ``error`` event (with
    ``error_type`` = :attr:`code`) is already stored."""


class ModelError(TurnError):
    """The model API failed: unreachable, an HTTP error status, or an answer that is not a chat completion.
    ``upstream_status`` is the status the model API answered, if any."""

    status = 502
    default_code = "model_error"

    def __init__(self, message: str, *, upstream_status: int | None = None, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.upstream_status = upstream_status


class ModelTimeout(ModelError):
    """The model API did not answer (or stopped streaming) within the timeout (HTTP 504)."""

    status = 504
    openai_type = "timeout"
    default_code = "model_timeout"


class StepLimitReached(TurnError):
    """The turn spent its ``agentic_loop_max_steps`` model requests without a final answer. Not a failure of
    the request: the turn answers with ``finish_reason: "length"`` and a message saying so."""

    status = 200
    default_code = "step_limit"


class BudgetExhausted(StepLimitReached):
    """A budget of the turn (``BUDGET_MAX_*``, or the smaller one a delegating agent passed) would be exceeded by
    the next model request or tool call, so the turn stopped before it. Like :class:`StepLimitReached`, not a
    failure of the request: ``finish_reason: "length"`` on ``/v1``, a ``failed`` A2A task. ``budget`` is the
    budget's name (``tool_calls``, ``model_requests``, ``tokens``, ``seconds``, ``cost_usd``); the message starts
    ``budget_exhausted: <budget>``."""

    default_code = "budget_exhausted"

    def __init__(self, message: str, *, budget: str = "", code: str | None = None, param: str | None = None) -> None:
        super().__init__(message, code=code, param=param)
        self.budget = budget

    @classmethod
    def of(cls, budget: str, detail: str) -> BudgetExhausted:
        """The error for ``budget`` running out: message ``budget_exhausted: <budget>: <detail>``."""
        return cls(f"budget_exhausted: {budget}: {detail}", budget=budget)


class TurnCancelled(TurnError):
    """The turn was stopped before it finished (the client went away, or the A2A task was canceled)."""

    status = 499
    default_code = "cancelled"


class MethodNotFound(RequestError):
    """A method this endpoint does not serve in the request's protocol version (JSON-RPC -32601)."""

    default_code = "method_not_found"
    jsonrpc_code = -32601


class VersionNotSupported(RequestError):
    """An ``A2A-Version`` Kora does not serve (A2A ``VersionNotSupportedError``, -32009)."""

    default_code = "version_not_supported"
    jsonrpc_code = -32009


class ContentTypeNotSupported(RequestError):
    """A part whose media type the agent does not accept (A2A ``ContentTypeNotSupportedError``, -32005)."""

    default_code = "content_type_not_supported"
    jsonrpc_code = -32005


class ForbiddenOrigin(Forbidden):
    """A request whose ``Origin`` is not allowed: HTTP 403, JSON-RPC -32600 (the request is refused whole)."""

    default_code = "forbidden_origin"
    jsonrpc_code = -32600


def internal_error(error: BaseException) -> KoraError:
    """``error`` as Kora reports it: itself when it is a :class:`KoraError`, else an internal error that names
    nothing of the server's internals (no type, message or traceback, which may hold paths or data), only a
    reference (``err_`` + 12 hex digits) under which the whole exception is logged (logger ``kora``)."""
    if isinstance(error, KoraError):
        return error
    reference = f"err_{uuid.uuid4().hex[:12]}"
    _log.error("internal error %s", reference, exc_info=error)
    return TurnError(f"Internal error (reference {reference}): the server's log has the details.")


def jsonrpc_error(error: KoraError) -> dict[str, object]:
    """``error`` as a JSON-RPC 2.0 error object: ``{"code": int, "message": str, "data": {"type": code}}``."""
    return {"code": error.jsonrpc_code, "message": error.message, "data": {"type": error.code}}


# -- errors a component raises and handles itself ---------------------------------------------------------------
# None of these reaches a client as it is: each is caught by the component that raises it (or ends a CLI with a
# message) and turned into what that component reports.


class ModelRetry(Exception):
    """The agent's model client (:mod:`kora.agent.model_client`): a failed attempt worth retrying: the failure to raise
    when retries are spent, and the delay the server asked for (``Retry-After``), if any."""

    def __init__(self, failure: ModelError, delay: float | None) -> None:
        super().__init__(failure.message)
        self.failure, self.delay = failure, delay


class SourceError(Exception):
    """The console (:mod:`kora.console.sources`): a read that failed; the message says why and what to do."""


class SettingsError(Exception):
    """Invalid or missing settings (:mod:`kora.core.settings_errors` builds it from pydantic's errors). ``problems``
    holds one ``"VARIABLE: reason"`` line per bad setting."""

    def __init__(self, component: str, problems: Iterable[str]) -> None:
        self.component = component
        self.problems = list(problems)
        lines = "\n".join(f"  - {problem}" for problem in self.problems)
        super().__init__(f"{component}: invalid configuration ({len(self.problems)} problem(s)):\n{lines}")


class AppStartupFailed(Exception):
    """The chassis's :class:`~kora.core.serving.BuildingApp`: the app it built failed its lifespan start-up (the
    message: what the app said, a traceback for a Starlette app). The command ends with uvicorn's exit code 3."""


class PackageError(Exception):
    """The MCP tool server's Python package (:mod:`kora.mcp.package`) cannot be served: not installed, fails to import,
    or exposes no ``MCPServer``."""


class ToolSourceError(Exception):
    """The MCP tool server's inline tools source (:mod:`kora.mcp.source`) cannot be served. ``line`` is the 1-based
    source line, or ``None`` if none applies."""

    def __init__(self, message: str, line: int | None = None) -> None:
        self.message = message
        self.line = line
        where = f"line {line}: " if line is not None else ""
        super().__init__(f"tools source {where}{message}")


class JournalUnavailable(Exception):
    """The approval journal (:class:`~kora.agent.approvals.ApprovalJournal`) cannot be read or written now: its
    database is down or unreachable; the message says why. The agent falls back to the turns its process holds."""


class StoreUnreachable(Exception):
    """The agent's remote memory (:mod:`kora.memory.remote`): the memory service could not be reached or answered an
    error status (a 5xx, or a 4xx it should not)."""


class StoreRefused(Exception):
    """The agent's remote memory (:mod:`kora.memory.remote`): the memory service refused a request as the client's
    mistake (4xx): the message says why, ``code`` is the error body's ``code`` (``""`` when the body has none),
    ``status`` the HTTP status it answered."""

    def __init__(self, message: str, code: str = "", status: int = 400) -> None:
        super().__init__(message)
        self.code = code
        self.status = status


class JobRetry(Exception):
    """A memory service job (:mod:`kora.memory_service.jobs`) cannot run now (a model API is unreachable, a fold of the
    session is running): try again later."""


class JobFailed(Exception):
    """A memory service job (:mod:`kora.memory_service.jobs`) cannot succeed (answers stayed invalid): record it as
    failed."""


class ModelUnreachable(Exception):
    """The memory service's model client (:mod:`kora.memory_service.models`): a model API could not be reached, timed
    out, or answered an error status."""


class ModelRefused(ModelUnreachable):
    """The memory service's model client (:mod:`kora.memory_service.models`): a model API refused the request's input
    (HTTP 400, 413 or 422: a text longer than the model takes, say). Sent again unchanged it is refused again; where
    nothing handles it, it is treated as :class:`ModelUnreachable` (tried again later)."""


class InvalidAnswer(Exception):
    """The memory service's model client (:mod:`kora.memory_service.models`): a chat answer is not JSON of the requested
    shape."""


class MissingUserError(RuntimeError):
    """The embedded Postgres (:mod:`kora.memory_service.passwd`): the uid has no user name and libnss-wrapper, which
    would give it one, is not installed."""


class SchemaTooNew(RuntimeError):
    """The memory service's schema (:mod:`kora.memory_service.schema`): the database was migrated by a newer Kora than
    this one; refusing to run against it."""


class ManifestError(ValueError):
    """The resource manifests are invalid (:mod:`kora.resources.loader`); ``problems`` lists every problem found
    (:class:`kora.resources.loader.Problem`; message: one per line)."""

    def __init__(self, problems: Iterable[object]) -> None:
        self.problems = list(problems)
        lines = "\n".join(f"  - {problem}" for problem in self.problems)
        super().__init__(f"invalid manifests ({len(self.problems)} problem(s)):\n{lines}")


class SimulatedDisconnect(Exception):
    """The scripted model (:mod:`kora.scripted.model`): raised inside a streamed response so the server drops the
    connection (``disconnect_after_chunks``)."""


class ScriptError(ValueError):
    """The scripted model (:mod:`kora.scripted.script`): a reply, rule or script file is malformed (unknown kind,
    missing field, bad regex, ...)."""


class MissingEnvironmentVariable(KeyError):
    """The MCP tool server's environment (:mod:`kora.mcp.redact`): ``os.environ[name]`` for a variable that is not
    set; says how secrets reach tools. A ``KeyError``, as tool code reading ``os.environ`` expects."""

    def __str__(self) -> str:
        name = self.args[0] if self.args else "?"
        return (
            f"environment variable {name!r} is not set (secrets reach tools as environment variables: "
            "add it to the MCPServer's spec.config.env, with a value or valueFrom.secretKeyRef)"
        )


class ApprovalConflict(RequestError):
    """Tool approvals (:mod:`kora.agent.approvals`): a decision on a call that is already decided, or expired
    (HTTP 409, JSON-RPC -32602)."""

    status = 409
    default_code = "approval_decided"
