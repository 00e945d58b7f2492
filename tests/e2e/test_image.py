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
import subprocess
import tarfile
import time
import tomllib
from pathlib import Path

import httpx
import pytest

from kora.core.net import free_port
from kora.scripted import TextReply
from tests.support.node import BuiltImage
from tests.support.scripted_server import ScriptedModelServer

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
AS_ROOT: list[str] = [] if os.geteuid() == 0 else ["sudo", "-n"]
pytestmark = pytest.mark.slow

# Mounts /proc and /dev in a private mount namespace (gone with the process), then runs as the given user.
_CHROOT = """
root=$1 user=$2; shift 2
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
exec chroot --userspec="$user" "$root" "$@"
"""


@pytest.fixture(scope="module")
def image(kora_image: BuiltImage) -> BuiltImage:
    """The session's image (tests/e2e/conftest.py builds it once for this module and the real-node tier)."""
    print(kora_image.archive)
    return kora_image


def in_image(image: BuiltImage, args: list[str], env: dict[str, str] | None = None) -> list[str]:
    """The command that runs ``args`` in the image's root filesystem as its process would run: its user,
    environment (plus ``env``) and working directory."""
    user = f"{image.process['user']['uid']}:{image.process['user']['gid']}"
    environment = [*image.process["env"], *(f"{name}={value}" for name, value in (env or {}).items())]
    in_cwd = ["/bin/sh", "-c", 'cd "$0" && exec "$@"', image.process["cwd"], *args]
    return [
        *AS_ROOT,
        *["unshare", "--mount", "--fork", "sh", "-ec", _CHROOT, "chroot", str(image.rootfs), user],
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


def test_kora_agent_chats_through_a_scripted_model(image: BuiltImage) -> None:
    port = free_port()
    with ScriptedModelServer() as model:
        model.enqueue(TextReply("hello from the image"))
        env = {
            "AGENT_NAME": "imaged",
            "MODEL_API_URL": model.url,
            "MODEL_NAME": model.model_name,
            "AGENT_PORT": str(port),
        }
        agent = subprocess.Popen(
            in_image(image, image.process["args"], env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60
            while True:
                assert agent.poll() is None, agent.stdout.read() if agent.stdout else ""
                try:
                    health = httpx.get(f"{base}/health", timeout=2)
                    break
                except httpx.TransportError:
                    assert time.monotonic() < deadline, "kora agent did not answer /health within 60 s"
                    time.sleep(0.1)
            assert health.status_code == 200
            assert health.json() == {"status": "ok", "agent": "imaged"}
            reply = httpx.post(
                f"{base}/v1/chat/completions",
                json={"model": "imaged", "messages": [{"role": "user", "content": "who are you?"}]},
                timeout=30,
            )
            assert reply.status_code == 200, reply.text
            assert reply.json()["choices"][0]["message"]["content"] == "hello from the image"
            assert model.requests[-1]["messages"][-1]["content"] == "who are you?"
        finally:
            stop(agent)


def stop(process: subprocess.Popen[str]) -> None:
    """Ends the process group the command started (unshare ignores SIGTERM while its child runs)."""
    subprocess.run([*AS_ROOT, "kill", "-TERM", "--", f"-{process.pid}"], check=False)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        subprocess.run([*AS_ROOT, "kill", "-KILL", "--", f"-{process.pid}"], check=False)
        process.wait(timeout=15)
