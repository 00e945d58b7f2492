"""docs/a2a.md's example of the REST binding's error body is the body the agent sends."""

from __future__ import annotations

import json

import pytest

from kora.agent.a2a.rest import rest_error_body
from kora.core.errors import ContentTypeNotSupported
from tests.support.doc_blocks import REPO, blocks

pytestmark = pytest.mark.unit


def test_the_documented_rest_error_body_is_the_one_sent():
    [shown] = [
        json.loads(block.code)
        for block in blocks(REPO / "docs" / "a2a.md")
        if block.language == "json" and "CONTENT_TYPE_NOT_SUPPORTED" in block.code
    ]
    status, sent = rest_error_body(ContentTypeNotSupported("Content type not supported: ..."))
    assert shown == sent
    assert shown["error"]["code"] == status == 415
