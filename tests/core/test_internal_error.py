"""An unexpected exception reaches a client as an internal error naming nothing of the server's internals, with a
reference under which the server logged the whole exception."""

import logging
import re

import pytest

from kora.core.errors import ModelError, TurnError, internal_error

pytestmark = pytest.mark.unit


def test_an_unexpected_exception_is_reported_by_reference_only(caplog: pytest.LogCaptureFixture) -> None:
    secret = "/srv/kora/secrets/db-password.txt"
    error = FileNotFoundError(secret)
    with caplog.at_level(logging.ERROR, logger="kora"):
        failure = internal_error(error)
    assert isinstance(failure, TurnError)
    assert secret not in failure.message
    assert "FileNotFoundError" not in failure.message
    match = re.search(r"reference (err_[0-9a-f]{12})", failure.message)
    assert match is not None
    (record,) = [r for r in caplog.records if match.group(1) in r.getMessage()]
    assert record.exc_info is not None
    assert record.exc_info[1] is error


def test_two_failures_get_two_references() -> None:
    first, second = internal_error(ValueError("a")), internal_error(ValueError("a"))
    assert first.message != second.message


def test_kora_errors_pass_through_unchanged() -> None:
    error = ModelError("The model API failed: 503")
    assert internal_error(error) is error
