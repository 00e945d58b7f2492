"""The tokens ``kora up`` generates for its workloads (docs/identity.md, "Who can read and erase what").

The wiring names, per workload, the Secrets of generated tokens it owns (``WorkloadPlan.credentials``: a
MemoryStore's admin and agent tokens, an agent's operator token) and refers to them with ``secretKeyRef``s. In a
cluster the operator keeps them in Secrets; here they live in ``<state dir>/credentials.json``, mode 0600, one
token per ``<namespace>/<secret>/<key>``, generated once (:func:`kora.core.tokens.new_token`) and kept across runs,
so a client that read a token keeps working after ``kora up`` restarts. ``kora token`` prints one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from kora.core.tokens import new_token
from kora.resources import WorkloadPlan

#: The file under the state directory.
CREDENTIALS_FILE = "credentials.json"


def credentials_file(state_dir: Path) -> Path:
    """``<state_dir>/credentials.json``."""
    return state_dir / CREDENTIALS_FILE


def _key(namespace: str, secret: str, key: str) -> str:
    return f"{namespace}/{secret}/{key}"


class Credentials:
    """The generated tokens of one state directory; :meth:`ensure` creates the missing ones and saves them."""

    def __init__(self, state_dir: Path) -> None:
        self.path = credentials_file(state_dir)
        self._tokens: dict[str, str] = read_credentials(state_dir)

    def ensure(self, plans: Iterable[WorkloadPlan]) -> None:
        """Generate the tokens ``plans`` own and lack; rewrite the file (mode 0600, atomically) when one was
        added. Raises ``OSError`` when it cannot be written."""
        added = False
        for plan in plans:
            for secret, keys in plan.credentials.items():
                for key in keys:
                    name = _key(plan.namespace, secret, key)
                    if name not in self._tokens:
                        self._tokens[name] = new_token()
                        added = True
        if added:
            temporary = self.path.with_suffix(f".{os.getpid()}.tmp")
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(descriptor, "w", encoding="utf-8") as out:
                json.dump(self._tokens, out, indent=2, sort_keys=True)
            os.replace(temporary, self.path)

    def get(self, namespace: str, secret: str, key: str) -> str | None:
        """The token of ``key`` in the generated Secret ``secret`` of ``namespace``; None when it is not one."""
        return self._tokens.get(_key(namespace, secret, key))


def read_credentials(state_dir: Path) -> dict[str, str]:
    """The tokens of ``state_dir`` by ``<namespace>/<secret>/<key>`` (empty when none were generated yet).
    Raises ``ValueError`` for a file that is not such a mapping."""
    try:
        raw = json.loads(credentials_file(state_dir).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
        raise ValueError(f"{credentials_file(state_dir)} is not a kora up credentials file")
    return dict(raw)
