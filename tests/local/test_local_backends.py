"""kora up's check of Proxy ModelAPI backends: a real backend on 127.0.0.1 and a port nothing listens on."""

import httpx
import pytest
from starlette.applications import Starlette

from kora.core.net import free_port
from kora.local.backends import BackendWatch, proxy_backends, unreachable_note
from kora.local.state import WorkloadState
from kora.resources import ResourceRef, load_text
from tests.support.threaded import ThreadedServer

pytestmark = pytest.mark.integration

MANIFEST = """
apiVersion: kora.dev/v1alpha1
kind: ModelAPI
metadata: {name: real}
spec: {mode: Proxy, proxyConfig: {apiBase: "http://127.0.0.1:1/v1"}}
---
apiVersion: kora.dev/v1alpha1
kind: ModelAPI
metadata: {name: offline}
spec: {mode: Scripted}
"""


def _workload(name: str, base: str) -> WorkloadState:
    return WorkloadState(name, "ModelAPI", "default", "g", "d", "l", note=f"proxy -> {base}")


def test_only_proxy_model_apis_are_checked():
    assert proxy_backends(load_text(MANIFEST, "kora.yaml")) == {
        ResourceRef("ModelAPI", "default", "real"): "http://127.0.0.1:1/v1"
    }


async def test_an_unreachable_backend_is_noted_and_cleared_once_it_answers():
    base = f"http://127.0.0.1:{free_port()}/v1"
    ref = ResourceRef("ModelAPI", "default", "real")
    workload = _workload("real", base)
    changes: list[str | None] = []
    watch = BackendWatch({ref: base}, {ref: workload}, lambda _, reason: changes.append(reason))
    async with httpx.AsyncClient(timeout=2) as client:
        await watch.check(client, ref)
        assert workload.note.startswith(f"proxy -> {base} (unreachable: ConnectError")
        await watch.check(client, ref)
        assert len(changes) == 1, "told once, not at every check"
        # Any HTTP answer, a 404 from an app with no routes included, means the backend is there.
        with ThreadedServer(Starlette()) as server:
            watch = BackendWatch({ref: server.root_url + "/v1"}, {ref: workload}, lambda _, r: changes.append(r))
            await watch.check(client, ref)
    assert workload.note == f"proxy -> {base}"
    assert changes[-1] is None


def test_the_note_keeps_its_base_whatever_the_reason():
    note = unreachable_note("proxy -> http://x/v1", "ConnectError: refused")
    assert note == "proxy -> http://x/v1 (unreachable: ConnectError: refused)"
    assert unreachable_note(note, "ReadTimeout") == "proxy -> http://x/v1 (unreachable: ReadTimeout)"
    assert unreachable_note(note, None) == "proxy -> http://x/v1"
