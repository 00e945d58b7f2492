"""Fixtures shared by the e2e tier: Kora's container image, built once per session."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from tests.support.node import BuiltImage, build_image


@pytest.fixture(scope="session")
def kora_image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BuiltImage]:
    """Kora's image built by scripts/image/build.sh from this checkout (root or ``sudo -n``; ~3 min on a new
    machine, seconds when only Kora's own layer changed). Removed at the end of the session."""
    image = build_image(tmp_path_factory.mktemp("image") / "out")
    yield image
    as_root = [] if os.geteuid() == 0 else ["sudo", "-n"]
    subprocess.run([*as_root, "rm", "-rf", str(image.out)], check=False)
