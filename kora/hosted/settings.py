"""The settings of ``kora model-hosted`` (``MODEL_HOSTED_*``), loaded like every workload's
(:func:`~kora.core.serving.settings.load_settings`): a bad start names every bad variable at once."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

from kora.core import env as names
from kora.core.serving import load_settings, request_limit_field

__all__ = ["COMPONENT", "ENV_PREFIX", "HostedSettings", "load_hosted_settings"]

#: What start-up errors name; every variable is this prefix + a field's name in upper case.
COMPONENT = "kora model-hosted"
ENV_PREFIX = "MODEL_HOSTED_"


class HostedSettings(BaseModel):
    """A ModelAPI in Hosted mode: the model to serve and how (docs/configuration.md lists these fields)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    model: str = Field(
        min_length=1,
        description="The model to serve: `all-MiniLM-L6-v2` or `sentence-transformers/all-MiniLM-L6-v2` (any case), "
        "the packaged 384-dimension embedding model (needs `pip install 'kora[embeddings]'`), or the exact name of "
        f"the sentence-transformers model in `{names.MODEL_HOSTED_MODEL_PATH}`. Another name without a path: exit 3 "
        "saying Hosted mode does not serve it.",
    )
    model_path: str | None = Field(
        default=None,
        description=f"Directory holding the files of the sentence-transformers model `{names.MODEL_HOSTED_MODEL}` "
        "names (as `SentenceTransformer(name).save(directory)` writes them), read with no network and served under "
        "that name only; unset: the packaged all-MiniLM-L6-v2. Not a directory, or no `modules.json`/`config.json` "
        "in it: exit 2 naming this setting.",
        json_schema_extra={"format": "path"},
    )
    threads: int = Field(
        default=names.DEFAULT_HOSTED_THREADS,
        ge=1,
        le=names.MAX_HOSTED_THREADS,
        description="Intra-op threads the model runtime encodes with. One keeps a short query from waiting on every "
        "core (torch's own default, one per core, is several times slower at p95 on a shared 2-core machine); more "
        "can speed up large batches on an idle machine with cores to spare.",
    )
    max_request_bytes: int = request_limit_field(names.DEFAULT_MAX_LARGE_REQUEST_BYTES)


def load_hosted_settings(environ: Mapping[str, str] | None = None) -> HostedSettings:
    """The settings from ``environ`` (default: the process environment).

    Raises :class:`~kora.core.settings_errors.SettingsError` listing every bad or missing ``MODEL_HOSTED_*``
    variable.
    """
    return load_settings(HostedSettings, COMPONENT, environ, env_prefix=ENV_PREFIX)
