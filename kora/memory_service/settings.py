"""Settings of ``kora memory``, the MemoryStore workload, read from ``MEMORY_SERVICE_*`` variables.

The table of variables is in docs/configuration.md "Memory service". The operator and ``kora up`` write these variables
from the MemoryStore's spec (``kora.resources.wiring``). Each field reads the variable ``MEMORY_SERVICE_`` + its
upper-cased name; :func:`load_memory_service_settings` validates everything at once and raises
:class:`~kora.core.settings_errors.SettingsError` naming every bad variable.

Token counts are estimates (a token is ~4 characters of English text): the service has no tokenizer of the
model its clients use, and bounds only need to be right within a small factor.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from kora.core.env import DEFAULT_MAX_LARGE_REQUEST_BYTES
from kora.core.net import is_http_url
from kora.core.serving import load_settings, request_limit_field
from kora.core.settings_model import WorkloadSettings

COMPONENT = "kora memory"
ENV_PREFIX = "MEMORY_SERVICE_"
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]


def _http_url(value: str) -> str:
    if value and not is_http_url(value):
        raise ValueError("must be an http(s) URL such as http://model:8000/v1")
    return value.rstrip("/")


class MemoryServiceSettings(WorkloadSettings):
    """Settings of one memory service. ``external`` storage needs ``database_url``; fact extraction and rolling
    summaries need the summary model; semantic recall needs the embedding model (without it recall uses full-text
    search only).

    Each field's ``description`` is its row in docs/configuration.md (``python scripts/gen_config_docs.py``).
    """

    storage_mode: Literal["local", "external"] = Field(
        default="local",
        description="`local`: an embedded Postgres with pgvector kept in `MEMORY_SERVICE_DATA_DIR`; `external`: "
        "the Postgres (with the `vector` extension) of `MEMORY_SERVICE_DATABASE_URL`.",
    )
    database_url: str = Field(
        default="",
        description="Postgres connection string (`postgresql://user:password@host:5432/db`); required with "
        "`external` storage.",
    )
    data_dir: Path = Field(default=Path("data"), description="Where `local` storage keeps its database.")
    summary_model_api_url: str = Field(
        default="",
        description="OpenAI-compatible base URL (with `/v1`) of the model that extracts facts and writes rolling "
        "summaries; empty: neither happens.",
        json_schema_extra={"format": "uri"},
    )
    summary_model: str = Field(default="", description="Model name sent to the summary model API.")
    embedding_model_api_url: str = Field(
        default="",
        description="OpenAI-compatible base URL (with `/v1`) of the embedding model; empty: recall by full-text "
        "search only.",
        json_schema_extra={"format": "uri"},
    )
    embedding_model: str = Field(default="", description="Model name sent to the embedding model API.")
    model_api_key: str = Field(default="kora-no-key", description="API key sent to both model APIs.")
    short_term_token_budget: int = Field(
        default=2000, ge=1, description="Short-term window: most tokens (estimated) of the events replayed."
    )
    short_term_hard_event_cap: int = Field(default=50, ge=1, description="Short-term window: most events replayed.")
    medium_term_enabled: bool = Field(default=True, description="Keep rolling summaries of turns that left the window.")
    compaction_trigger: int = Field(
        default=20, ge=1, description="Events out of the window and not yet summarised that start a summary fold."
    )
    compaction_target: int = Field(default=400, ge=16, description="Length a rolling summary aims at, in tokens.")
    digest_retention: int = Field(default=5, ge=1, description="Rolling-summary versions kept per session.")
    long_term_enabled: bool = Field(default=True, description="Extract long-term facts from turns in the background.")
    default_top_k: int = Field(default=5, ge=1, le=100, description="Facts a recall returns when it names no count.")
    score_threshold: float = Field(
        default=0.2, ge=0.0, le=1.0, description="Recall drops hits scoring below this (scores are in [0, 1])."
    )
    max_read_scope: Literal["session", "agent", "user"] = Field(
        default="user", description="Broadest scope an agent may read (`store` is for administrators only)."
    )
    extraction_attempts: int = Field(
        default=3, ge=1, le=10, description="Model requests per extraction before the job is recorded as failed."
    )
    workers: int = Field(default=2, ge=0, le=32, description="Background workers (fact extraction, summary folds).")
    job_lease_seconds: float = Field(
        default=30.0,
        ge=1.0,
        le=3600.0,
        description="A claimed background job is renewed every third of this while it runs; a job whose worker "
        "died is run again once this has passed.",
    )
    embed_batch: int = Field(
        default=64,
        ge=1,
        le=256,
        description="Facts given an embedding per background `embed` job: after the embedding model changed "
        "(name or dimension), or for facts stored while it could not be reached.",
    )
    admin_token: str = Field(
        default="",
        repr=False,
        description="Bearer token of the admin credential: every route, including what spans agents or users "
        "(facts at `store` scope, all sessions, jobs). Empty: those routes are refused. The operator and `kora up` "
        "generate it.",
    )
    agent_token: str = Field(
        default="",
        repr=False,
        description="Bearer token of the bound agents (their `MEMORY_STORE_TOKEN`): one agent's sessions, context, "
        "events, recall, fact writes and the erasures it forwards. Empty: only the admin token is accepted.",
    )
    log_level: LogLevel = Field(default="INFO", description="Log level (any case).")
    max_request_bytes: int = request_limit_field(DEFAULT_MAX_LARGE_REQUEST_BYTES)

    @field_validator("summary_model_api_url", "embedding_model_api_url")
    @classmethod
    def _urls(cls, value: str) -> str:
        return _http_url(value)

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper_log_level(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    @property
    def has_summary_model(self) -> bool:
        """True when a summary model is configured (fact extraction and rolling summaries can run)."""
        return bool(self.summary_model_api_url)

    @property
    def has_embedding_model(self) -> bool:
        """True when an embedding model is configured (semantic recall)."""
        return bool(self.embedding_model_api_url)


def load_memory_service_settings(environ: Mapping[str, str] | None = None) -> MemoryServiceSettings:
    """Read and validate the settings from ``environ`` (default: the process environment).

    Raises :class:`~kora.core.settings_errors.SettingsError` listing every bad or missing ``MEMORY_SERVICE_*`` variable.
    """
    return load_settings(MemoryServiceSettings, COMPONENT, environ, env_prefix=ENV_PREFIX, check=_pairing_problems)


def _pairing_problems(fields: Mapping[str, str]) -> list[str]:
    """Settings that make sense only together: external storage and its URL, each model's URL and name."""
    problems = []
    if fields.get("storage_mode", "").strip().lower() == "external" and not fields.get("database_url", "").strip():
        problems.append(f"{ENV_PREFIX}DATABASE_URL: required with {ENV_PREFIX}STORAGE_MODE=external")
    for name in ("summary", "embedding"):
        url, model = fields.get(f"{name}_model_api_url", "").strip(), fields.get(f"{name}_model", "").strip()
        if bool(url) != bool(model):
            upper = name.upper()
            problems.append(f"{ENV_PREFIX}{upper}_MODEL_API_URL and {ENV_PREFIX}{upper}_MODEL: set both or neither")
    return problems
