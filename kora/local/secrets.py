"""Where ``kora up`` finds the values of ``secretKeyRef`` references: the manifests, or the environment.

On a cluster a ``secretKeyRef`` names a Secret that lives there. ``kora up`` has no cluster, so each value
comes from one of two places:

* a ``v1`` Secret document in the manifests (``data`` base64, or ``stringData`` plain);
* a variable of the shell that runs ``kora up``, named with ``--secret-env [NAMESPACE/]NAME/KEY=VARIABLE``
  (namespace ``default`` when omitted): the key never has to be written to a file. Only the workload whose
  manifest references the Secret gets the value, as on a cluster; the variable itself is not handed on.

A reference found in neither is an error naming both ways (:class:`SecretSource.value`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kora.resources import ResourceGraph, secret_refs_of

__all__ = ["SECRET_ENV_FORMAT", "SecretSource", "parse_secret_env"]

#: How ``--secret-env`` is written (for messages).
SECRET_ENV_FORMAT = "[NAMESPACE/]NAME/KEY=VARIABLE"
# Secret names and namespaces are DNS names; keys are [-._a-zA-Z0-9]+ (Kubernetes' rules); variables are
# shell names.
_SECRET_ENV = re.compile(
    r"^(?:(?P<namespace>[a-z0-9]([-a-z0-9]*[a-z0-9])?)/)?(?P<name>[a-z0-9]([-.a-z0-9]*[a-z0-9])?)/"
    r"(?P<key>[-._a-zA-Z0-9]+)=(?P<variable>[A-Za-z_][A-Za-z0-9_]*)$"
)

#: ``(namespace, secret name, key)``.
SecretKey = tuple[str, str, str]


def parse_secret_env(options: Iterable[str], environ: Mapping[str, str]) -> dict[SecretKey, str]:
    """The values ``--secret-env`` options give, read from ``environ``: ``{(namespace, name, key): value}``.

    Raises ``ValueError`` naming the option when one is not :data:`SECRET_ENV_FORMAT`, names a variable that
    is unset or empty, or names a Secret key a previous option named already."""
    values: dict[SecretKey, str] = {}
    for option in options:
        match = _SECRET_ENV.match(option.strip())
        if match is None:
            raise ValueError(
                f"--secret-env {option!r}: expected {SECRET_ENV_FORMAT}, "
                "e.g. --secret-env openai/api-key=OPENAI_API_KEY"
            )
        key = (match["namespace"] or "default", match["name"], match["key"])
        variable = match["variable"]
        if not environ.get(variable):
            raise ValueError(f"--secret-env {option}: the variable {variable} is not set (or empty) in this shell")
        if key in values:
            raise ValueError(f"--secret-env {option}: Secret {key[0]}/{key[1]} key {key[2]!r} is given twice")
        values[key] = environ[variable]
    return values


@dataclass
class SecretSource:
    """The Secret values ``kora up`` resolves references with: ``from_env`` (``--secret-env``, which wins)
    over the Secret documents of the manifests' graph given to :meth:`value`."""

    from_env: Mapping[SecretKey, str] = field(default_factory=dict)

    def value(self, graph: ResourceGraph, namespace: str, name: str, key: str) -> str:
        """The value of ``key`` of Secret ``namespace/name``. Raises ``LookupError`` saying how to give it when
        neither ``--secret-env`` nor the manifests have it."""
        given = self.from_env.get((namespace, name, key))
        if given is not None:
            return given
        value = graph.secret_value(name, key, namespace)
        if value is None:
            prefix = "" if namespace == "default" else f"{namespace}/"
            raise LookupError(
                f"Secret {namespace}/{name} key {key!r} is not in the manifests; add a v1 Secret document "
                f"{name!r} with that key (stringData), or give it from your shell: "
                f"kora up --secret-env {prefix}{name}/{key}=VARIABLE (docs/local.md, 'Secrets')"
            )
        return value

    def unused(self, graph: ResourceGraph) -> list[SecretKey]:
        """The ``--secret-env`` keys no reference of ``graph`` uses (likely a typo), sorted."""
        used = {
            (resource.metadata.namespace, name, key)
            for resource in graph
            for _path, name, key in secret_refs_of(resource)
        }
        return sorted(set(self.from_env) - used)
