"""A2A version negotiation and error shapes (:mod:`kora.agent.a2a.negotiation`)."""

from __future__ import annotations

import pytest
from starlette.datastructures import Headers, QueryParams

import kora.core.errors as errors
from kora.agent.a2a import negotiation
from kora.agent.a2a.negotiation import V03, V1, asked_version, error_object, negotiate
from kora.core.errors import VersionNotSupported

pytestmark = pytest.mark.unit


def _all_error_classes() -> list[type[errors.KoraError]]:
    found: list[type[errors.KoraError]] = []
    pending: list[type[errors.KoraError]] = [errors.KoraError]
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


@pytest.mark.parametrize("cls", _all_error_classes(), ids=lambda cls: cls.__name__)
def test_every_kora_error_renders_in_both_versions(cls):
    error = cls("what went wrong")
    v1 = error_object(error, V1)
    assert v1["code"] == error.jsonrpc_code
    assert v1["message"] == "what went wrong"
    (info,) = v1["data"]
    assert info["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"
    assert info["domain"] == "a2a-protocol.org"
    assert info["metadata"] == {"type": error.code}
    assert error_object(error, V03) == {
        "code": error.jsonrpc_code,
        "message": "what went wrong",
        "data": {"type": error.code},
    }


@pytest.mark.parametrize(
    ("asked", "served"), [(None, V03), ("0.3", V03), ("0.3.0", V03), ("1.0", V1), ("1", V1), ("1.0.1", V1), ("1.2", V1)]
)
def test_served_versions(asked, served):
    assert negotiate(asked) == served


@pytest.mark.parametrize("asked", ["2.0", "0.2", "0.4", "banana", "1.0; drop"])
def test_other_versions_are_not_supported(asked):
    with pytest.raises(VersionNotSupported):
        negotiate(asked)


def test_the_header_wins_over_the_query_parameter():
    assert asked_version(Headers({"A2A-Version": "1.0"}), QueryParams("A2A-Version=0.3")) == "1.0"
    assert asked_version(Headers({}), QueryParams("A2A-Version=1.0")) == "1.0"
    assert asked_version(Headers({"A2A-Version": " "}), QueryParams("")) is None
    assert negotiation.VERSION_NAME == "A2A-Version"
