"""Kora's container image, built offline by scripts/image/build.sh (Debian's archive, mmdebstrap, umoci).

The OCI archive is read as a registry would (index, manifest, config, layer digests), and Kora is started in the
root filesystem unpacked from it, with the process the image's runtime configuration describes (arguments,
environment, working directory, user 65532), under ``chroot``: there is no container engine on these machines.
``kora agent`` answers a chat through a scripted model served on the host. Needs root (or ``sudo -n``), as the
build does; a first build on a machine takes ~3 minutes, later ones reuse the cached Debian and dependency layers.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import tarfile
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from kora.core.net import free_port
from kora.operator.children import MEMORY_DATA_ROOT
from kora.scripted import TextReply
from tests.support.mcp import mcp_session
from tests.support.memory import ADMIN, CREDENTIALS
from tests.support.node import BuiltImage
from tests.support.processes import wait_healthy
from tests.support.scripted_server import ScriptedModelServer

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
AS_ROOT: list[str] = [] if os.geteuid() == 0 else ["sudo", "-n"]
pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# In a private mount namespace (gone with the process): with read_only=yes, the root filesystem read-only and a
# tmpfs on /tmp, as a pod with readOnlyRootFilesystem and an emptyDir there runs it; a host directory on the
# memory store's data mount (when one is given); /proc and /dev; then runs the command as the given user.
_CHROOT = """
root=$1 user=$2 read_only=$3 data=$4 data_mount=$5; shift 5
[ -z "$data" ] || mkdir -p "$root$data_mount"
if [ "$read_only" = yes ]; then
  mount --bind "$root" "$root"
  mount -o remount,bind,ro "$root"
  mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
fi
[ -z "$data" ] || mount --bind "$data" "$root$data_mount"
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
exec chroot --userspec="$user" "$root" "$@"
"""


@pytest.fixture(scope="module")
def image(kora_image: BuiltImage) -> BuiltImage:
    """The session's image (tests/e2e/conftest.py builds it once for this module and the real-node tier)."""
    print(kora_image.archive)
    return kora_image


def in_image(
    image: BuiltImage,
    args: list[str],
    env: dict[str, str] | None = None,
    *,
    user: str | None = None,
    read_only: bool = False,
    data: Path | None = None,
) -> list[str]:
    """The command that runs ``args`` in the image's root filesystem as its process would run: its user (or
    ``user``, ``uid:gid``), environment (plus ``env``) and working directory. ``read_only``: the root filesystem
    read-only, /tmp a tmpfs; ``data``: a host directory mounted where the operator mounts a local-storage
    MemoryStore's volume (:data:`MEMORY_DATA_ROOT`)."""
    user = user or f"{image.process['user']['uid']}:{image.process['user']['gid']}"
    environment = [*image.process["env"], *(f"{name}={value}" for name, value in (env or {}).items())]
    in_cwd = ["/bin/sh", "-c", 'cd "$0" && exec "$@"', image.process["cwd"], *args]
    mounts = ["yes" if read_only else "no", str(data or ""), str(MEMORY_DATA_ROOT)]
    return [
        *AS_ROOT,
        *["unshare", "--mount", "--fork", "sh", "-ec", _CHROOT, "chroot", str(image.rootfs), user, *mounts],
        *["/usr/bin/env", "-i", *environment, *in_cwd],
    ]


def read_blob(archive: tarfile.TarFile, digest: str) -> bytes:
    algorithm, hexdigest = digest.split(":")
    member = archive.extractfile(f"./blobs/{algorithm}/{hexdigest}")
    assert member is not None, digest
    data = member.read()
    assert hashlib.sha256(data).hexdigest() == hexdigest, f"blob {digest} does not match its digest"
    return data


def test_archive_is_an_oci_image_configured_for_every_workload(image: BuiltImage) -> None:
    with tarfile.open(image.archive) as archive:
        layout = json.loads(archive.extractfile("./oci-layout").read())  # type: ignore[union-attr]
        index = json.loads(archive.extractfile("./index.json").read())  # type: ignore[union-attr]
        [entry] = index["manifests"]
        manifest = json.loads(read_blob(archive, entry["digest"]))
        config = json.loads(read_blob(archive, manifest["config"]["digest"]))
        layers = [(layer["mediaType"], len(read_blob(archive, layer["digest"]))) for layer in manifest["layers"]]

    assert layout["imageLayoutVersion"] == "1.0.0"
    assert entry["annotations"]["org.opencontainers.image.ref.name"] == VERSION
    # Debian, the dependencies' virtualenv, Kora: a code change ships only the last one.
    assert [media for media, _ in layers] == ["application/vnd.oci.image.layer.v1.tar+gzip"] * 3
    assert layers[2][1] < layers[1][1] / 20, layers
    run = config["config"]
    assert config["os"] == "linux"
    assert run["User"] == "65532:65532"
    assert run["Entrypoint"] == ["kora"]
    assert run["Cmd"] == ["agent"]
    assert run["ExposedPorts"] == {"8000/tcp": {}}
    assert run["WorkingDir"] == "/home/kora"
    assert {"PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1"} <= set(run["Env"])
    assert run["Labels"]["org.opencontainers.image.version"] == VERSION
    assert run["Labels"]["io.kora.extras"] == "none"


def test_rootfs_holds_no_build_leftovers(image: BuiltImage) -> None:
    for leftover in ("var/lib/apt/lists", "var/cache/apt", "var/log", "tmp", "dev", "usr/share/man"):
        path = image.rootfs / leftover
        assert not path.exists() or not any(path.iterdir()), f"{leftover} is not empty"
    assert not (image.rootfs / "root/.cache").exists()  # pip's cache
    sizes = dict(line.split()[:2] for line in (image.out / "sizes.txt").read_text().splitlines())
    assert int(sizes["archive"]) == image.archive.stat().st_size


def test_kora_version_as_the_image_user(image: BuiltImage) -> None:
    assert image.process["args"] == ["kora", "agent"]
    ran = subprocess.run(
        in_image(image, ["sh", "-c", "id -u && kora --version"]), capture_output=True, text=True, timeout=60
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split("\n")[:2] == ["65532", f"kora {VERSION}"]


def test_every_workload_module_imports(image: BuiltImage) -> None:
    # Each `kora <command>` dispatches to a module (kora.cli.COMMANDS); all of them must load with the image's
    # packages (model-hosted's optional extra is imported only when it serves, so it loads too).
    code = (
        "import importlib, kora.cli\n"
        "for module, _, _ in kora.cli.COMMANDS.values(): importlib.import_module(module)\n"
        "print('ok')"
    )
    ran = subprocess.run(in_image(image, ["python", "-c", code]), capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "ok"


#: A uid of a PodSecurity ``restricted`` namespace or OpenShift's kind: high, unknown to the image, group 0.
RANDOM_UID = random.SystemRandom().randrange(1_000_000_000, 2_000_000_000)
#: As the operator runs every workload: uid and gid 10001 (unknown to the image), a read-only root filesystem
#: with an emptyDir on /tmp, HOME there.
AS_A_POD: dict[str, Any] = {"user": "10001:10001", "read_only": True}
POD_ENV = {"HOME": "/tmp"}


@contextmanager
def serving(
    image: BuiltImage,
    args: list[str],
    env: dict[str, str],
    ready_url: str,
    log: Path,
    within: float = 60.0,
    **where: Any,
) -> Iterator[subprocess.Popen[bytes]]:
    """``args`` run in the image (:func:`in_image` with ``where``), yielded once ``ready_url`` answers 200;
    ended at the end. Its output goes to ``log``, shown when it fails."""
    with log.open("w") as output:
        process = subprocess.Popen(
            in_image(image, args, env, **where), stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        wait_healthy(ready_url, process, within=within, explain=log.read_text, every=0.1)
        yield process
    finally:
        stop(process)


def test_kora_agent_chats_through_a_scripted_model(image: BuiltImage, tmp_path: Path) -> None:
    port = free_port()
    with ScriptedModelServer() as model:
        model.enqueue(TextReply("hello from the image"))
        env = {
            **POD_ENV,
            "AGENT_NAME": "imaged",
            "MODEL_API_URL": model.url,
            "MODEL_NAME": model.model_name,
            "AGENT_PORT": str(port),
        }
        base = f"http://127.0.0.1:{port}"
        with serving(image, image.process["args"], env, f"{base}/ready", tmp_path / "agent.log", **AS_A_POD):
            health = httpx.get(f"{base}/health", timeout=5)
            assert health.json() == {"status": "ok", "agent": "imaged"}
            reply = httpx.post(
                f"{base}/v1/chat/completions",
                json={"model": "imaged", "messages": [{"role": "user", "content": "who are you?"}]},
                timeout=30,
            )
            assert reply.status_code == 200, reply.text
            assert reply.json()["choices"][0]["message"]["content"] == "hello from the image"
            assert model.requests[-1]["messages"][-1]["content"] == "who are you?"


TOOLS = 'def add(a: int, b: int) -> int:\n    """Add two numbers."""\n    return a + b\n'


async def test_kora_mcp_serves_inline_tools_as_a_pod_runs_it(image: BuiltImage, tmp_path: Path) -> None:
    port = free_port()
    env = {**POD_ENV, "MCP_TOOLS_STRING": TOOLS}
    args = ["kora", "mcp", "--host", "127.0.0.1", "--port", str(port)]
    base = f"http://127.0.0.1:{port}"
    with serving(image, args, env, f"{base}/ready", tmp_path / "mcp.log", **AS_A_POD):
        async with mcp_session(f"{base}/mcp") as session:
            result = await session.call_tool("add", {"a": 2, "b": 3})
        assert not result.is_error, result
        assert result.structured_content == {"result": 5}, result


def test_kora_model_and_model_proxy_as_a_pod_runs_them(image: BuiltImage, tmp_path: Path) -> None:
    model_port, proxy_port = free_port(), free_port()
    model_url = f"http://127.0.0.1:{model_port}"
    model_args = ["kora", "model", "--host", "127.0.0.1", "--port", str(model_port)]
    proxy_args = ["kora", "model-proxy", "--host", "127.0.0.1", "--port", str(proxy_port)]
    proxy_env = {**POD_ENV, "MODEL_PROXY_API_BASE": f"{model_url}/v1", "MODEL_PROXY_MODELS": "scripted"}
    proxy_url = f"http://127.0.0.1:{proxy_port}"
    with (
        serving(image, model_args, POD_ENV, f"{model_url}/health", tmp_path / "model.log", **AS_A_POD),
        serving(image, proxy_args, proxy_env, f"{proxy_url}/health", tmp_path / "proxy.log", **AS_A_POD),
    ):
        reply = httpx.post(
            f"{proxy_url}/v1/chat/completions",
            json={"model": "scripted", "messages": [{"role": "user", "content": "hello"}]},
            timeout=30,
        )
        assert reply.status_code == 200, reply.text
        assert reply.json()["choices"][0]["message"]["role"] == "assistant"


@pytest.mark.parametrize(("uid", "gid"), [(10001, 10001), (RANDOM_UID, 0)], ids=["uid-10001", "random-uid-gid-0"])
def test_kora_memory_with_embedded_postgres_under_a_uid_the_image_does_not_know(
    image: BuiltImage, tmp_path: Path, uid: int, gid: int
) -> None:
    # As a pod runs it: any non-root uid, a read-only root filesystem with /tmp writable, the data on a volume the
    # uid owns (the pod's fsGroup does that on a cluster), HOME in /tmp.
    data = tmp_path / "data"
    data.mkdir()
    subprocess.run([*AS_ROOT, "chown", f"{uid}:{gid}", str(data)], check=True)
    port = free_port()
    env = {
        **POD_ENV,
        **CREDENTIALS,
        "MEMORY_SERVICE_STORAGE_MODE": "local",
        "MEMORY_SERVICE_DATA_DIR": f"{MEMORY_DATA_ROOT}/store",
    }
    command = ["sh", "-c", f'echo "uid $(id -u)"; exec kora memory --host 127.0.0.1 --port {port}']
    log = tmp_path / "memory.log"
    base = f"http://127.0.0.1:{port}"
    pod = {"user": f"{uid}:{gid}", "read_only": True, "data": data}
    # A first start runs initdb: a generous bound.
    with serving(image, command, env, f"{base}/ready", log, within=180, **pod):
        assert log.read_text().splitlines()[0] == f"uid {uid}"
        turn = {
            "app_name": "imaged",
            "user_id": "alice",
            "events": [{"event_type": "user_message", "content": "stored under an unknown uid"}],
        }
        stored = httpx.post(f"{base}/v1/sessions/s1/events", json=turn, headers=ADMIN, timeout=30)
        assert stored.status_code == 200, stored.text
        events = httpx.get(f"{base}/v1/sessions/s1/events", params={"app_name": "imaged"}, headers=ADMIN, timeout=30)
        assert [event["content"] for event in events.json()["events"]] == ["stored under an unknown uid"]
    # Postgres ran as that uid: its data directory is the uid's.
    assert (data / "store" / "pgdata").stat().st_uid == uid


def stop(process: subprocess.Popen[str] | subprocess.Popen[bytes]) -> None:
    """Ends the process group the command started (unshare ignores SIGTERM while its child runs)."""
    subprocess.run([*AS_ROOT, "kill", "-TERM", "--", f"-{process.pid}"], check=False)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        subprocess.run([*AS_ROOT, "kill", "-KILL", "--", f"-{process.pid}"], check=False)
        process.wait(timeout=15)
