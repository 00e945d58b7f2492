"""The operator's Kubernetes credentials, found before anything starts.

Looked for as lightkube's :meth:`KubeConfig.from_env` does: the pod's service account (in a cluster), else the
kubeconfig file ``KUBECONFIG`` names, else ``~/.kube/config``. When none can be used, :func:`load_kube_config`
raises one ``ValueError`` saying what was looked for and what to do, so ``kora operator`` can print one line
and exit 2 instead of a traceback from deep inside the client.
"""

from __future__ import annotations

import os

import yaml
from lightkube.config.kubeconfig import DEFAULT_KUBECONFIG, SERVICE_ACCOUNT, KubeConfig
from lightkube.core.exceptions import ConfigError

__all__ = ["load_kube_config"]


def load_kube_config() -> KubeConfig:
    """The credentials the operator talks to the API server with (see the module docstring).

    Raises ``ValueError`` ("no Kubernetes credentials: ..." naming the kubeconfig path looked at, or
    "KUBECONFIG=<path>: <reason>" for a kubeconfig that exists but cannot be used)."""
    with_service_account = os.path.exists(os.path.join(SERVICE_ACCOUNT, "token"))
    try:
        return KubeConfig.from_env()
    except ConfigError as error:
        problem = str(error)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = f"cannot be used (invalid YAML{where}: {error.problem})"
    except (yaml.YAMLError, KeyError, TypeError, AttributeError, ValueError) as error:
        problem = f"cannot be used ({type(error).__name__}: {' '.join(str(error).split())})"
    path = os.environ.get("KUBECONFIG") or DEFAULT_KUBECONFIG
    if not with_service_account and not os.path.isfile(os.path.expanduser(path)):
        raise ValueError(
            f"no Kubernetes credentials: not in a pod (no {SERVICE_ACCOUNT}/token) and no kubeconfig at {path}; "
            "set KUBECONFIG to a kubeconfig file, or run the operator in the cluster (deploy/helm)"
        )
    source = "the pod's service account" if with_service_account else f"KUBECONFIG={path}"
    raise ValueError(f"{source}: {problem}")
