import os

import pytest

from tests.support import agent as agent_support
from tests.support.scripted_server import ScriptedModelServer


@pytest.fixture
async def model():
    """A scripted OpenAI-compatible model on 127.0.0.1 (the only stand-in allowed: the LLM)."""
    async with ScriptedModelServer() as server:
        yield server


@pytest.fixture(params=["direct", "agent"])
def turn_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a test once per turn path: ``direct`` (a turn's first model request sent by the runtime, the
    default) and ``agent`` (every request in pydantic-ai's Agent, ``AGENT_DIRECT_FIRST_REQUEST=false``).
    Use it with ``pytestmark = pytest.mark.usefixtures("turn_path")``; agents and runtimes made through
    ``tests.support.agent`` pick it up."""
    monkeypatch.setitem(agent_support.DEFAULT_ENV, "AGENT_DIRECT_FIRST_REQUEST", str(request.param == "direct"))
    return str(request.param)


@pytest.fixture(scope="session")
def postgres(tmp_path_factory: pytest.TempPathFactory):
    """A real Postgres 18 with pgvector for the whole test session; its admin connection URI."""
    from tests.support.memory import start_postgres

    with start_postgres(tmp_path_factory.mktemp("postgres") / "pgdata") as uri:
        yield uri


@pytest.fixture
def memory_db(postgres: str) -> str:
    """An empty database of its own for one test; its connection URI."""
    from tests.support.memory import fresh_database

    return fresh_database(postgres)


@pytest.fixture(scope="session")
def kube_cluster(tmp_path_factory: pytest.TempPathFactory):
    """A real Kubernetes 1.20 API server (etcd + kube-apiserver + a controller-manager running only the garbage
    collector and namespace controller) on 127.0.0.1 for the whole session, with Kora's and the Gateway API CRDs
    installed: a ``tests.support.kube.KubeCluster``. Builds the binaries first when this machine has none (minutes,
    once); fails, never skips, when that is impossible."""
    from tests.support.kube import session_kube_cluster

    with session_kube_cluster(tmp_path_factory.mktemp("kube")) as cluster:
        yield cluster


@pytest.fixture
def kube_namespace(kube_cluster) -> str:
    """A namespace of its own for one test, on ``kube_cluster``; its name."""
    return kube_cluster.fresh_namespace()


#: Set by scripts/test.sh (the suite CI runs): tests marked ``embeddings`` must run there, never be skipped.
REQUIRE_EMBEDDINGS = "KORA_REQUIRE_EMBEDDINGS"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``embeddings`` need the optional embeddings extra: skip them, saying how to install it, where
    it is missing; fail the run instead when ``KORA_REQUIRE_EMBEDDINGS=1``."""
    marked = [item for item in items if item.get_closest_marker("embeddings") is not None]
    if not marked:
        return
    from kora.resources.hosted_models import MINILM, install_command, missing_extra_message

    missing = missing_extra_message(MINILM)
    if missing is None:
        return
    if os.environ.get(REQUIRE_EMBEDDINGS) == "1":
        raise pytest.UsageError(f"{REQUIRE_EMBEDDINGS}=1, but {missing}")
    skip = pytest.mark.skip(reason=f"needs the embeddings extra: {install_command(MINILM)}")
    for item in marked:
        item.add_marker(skip)
