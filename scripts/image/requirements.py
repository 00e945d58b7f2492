"""Print Kora's runtime requirements, one per line, as pyproject.toml declares them.

Used by the image builds (the Dockerfile and scripts/image/build.sh) to install the dependencies in a layer of
their own, before Kora's wheel, so a code change rebuilds only the small layer with Kora in it::

    python3 scripts/image/requirements.py pyproject.toml [EXTRA,...] > requirements.txt
    pip install -c constraints.txt -r requirements.txt

``EXTRA`` names optional-dependency groups (e.g. ``embeddings``); an unknown one exits 2 with a message. Only
the standard library is used: it runs with the image's bare Python 3.11 (tomllib).
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path


def requirements(pyproject: Path, extras: list[str]) -> list[str]:
    """Return ``[project].dependencies`` plus those of each extra in ``extras``; raises KeyError for an unknown one."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    found: list[str] = list(project["dependencies"])
    optional: dict[str, list[str]] = project.get("optional-dependencies", {})
    for extra in extras:
        found += optional[extra]
    return found


def main(argv: list[str]) -> int:
    """Command line: ``requirements.py PYPROJECT [EXTRA,...]``; returns the exit code."""
    if len(argv) not in (1, 2):
        print("usage: requirements.py PYPROJECT [EXTRA,...]", file=sys.stderr)
        return 2
    extras = [name for name in (argv[1].split(",") if len(argv) == 2 else []) if name]
    try:
        print("\n".join(requirements(Path(argv[0]), extras)))
    except KeyError as missing:
        print(f"requirements.py: no optional dependencies named {missing} in {argv[0]}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
