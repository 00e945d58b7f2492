"""The image's two recipes (Dockerfile, scripts/image/build.sh) agree, and requirements.py lists what pyproject says."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
BUILD_SH = (ROOT / "scripts/image/build.sh").read_text()


def requirements(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts/image/requirements.py"), str(ROOT / "pyproject.toml"), *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_requirements_are_the_runtime_dependencies() -> None:
    listed = requirements()
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines() == PROJECT["dependencies"]
    # The build scripts pass an empty extras argument when none is asked for.
    assert requirements("").stdout == listed.stdout


def test_requirements_add_the_named_extras() -> None:
    listed = requirements("embeddings")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines() == PROJECT["dependencies"] + PROJECT["optional-dependencies"]["embeddings"]


def test_unknown_extra_is_refused_with_a_message() -> None:
    listed = requirements("nonexistent")
    assert listed.returncode == 2
    assert "no optional dependencies named 'nonexistent'" in listed.stderr
    assert listed.stdout == ""


def test_dockerfile_version_label_default_is_the_project_version() -> None:
    assert f"ARG VERSION={PROJECT['version']}\n" in DOCKERFILE


def test_both_recipes_install_the_same_debian_packages_user_and_configuration() -> None:
    match = re.search(r"^packages=(\S+)$", BUILD_SH, re.MULTILINE)
    assert match is not None
    for package in match.group(1).split(","):
        assert f" {package}" in DOCKERFILE, package
    for shared in (
        "/opt/kora/venv",
        "kora:x:65532:65532:Kora:/home/kora:/usr/sbin/nologin",
        "PYTHONDONTWRITEBYTECODE=1",
        "PYTHONUNBUFFERED=1",
        "org.opencontainers.image.version",
    ):
        assert shared in DOCKERFILE, shared
        assert shared in BUILD_SH or shared.replace("65532", "$uid").replace("/home/kora", "$home") in BUILD_SH, shared
    assert 'ENTRYPOINT ["kora"]' in DOCKERFILE
    assert "--config.entrypoint kora" in BUILD_SH
    assert 'CMD ["agent"]' in DOCKERFILE
    assert "--config.cmd agent" in BUILD_SH
    assert "EXPOSE 8000" in DOCKERFILE
    assert "--config.exposedports 8000/tcp" in BUILD_SH
    assert "USER 65532:65532" in DOCKERFILE
    assert "uid=65532" in BUILD_SH
