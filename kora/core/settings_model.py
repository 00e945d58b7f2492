"""The base of every workload's pydantic-settings model: it validates the values it is given, and only those.

:func:`~kora.core.serving.settings.load_settings` reads a workload's variables from the environment, with the
one rule docs/configuration.md states (:func:`~kora.core.settings_errors.settings_fields`: one-line values
trimmed, a variable that is empty or blank counts as not set) and passes them to the model. pydantic-settings
would, by default, read ``os.environ`` again while it validates (its environment source sits under the values
given), bringing back a variable the loader left out as blank (``MEMORY_TOOLS=""`` refused as no memory-tools
mode instead of giving the default) and mixing the process environment into settings loaded from an explicit
mapping. :class:`WorkloadSettings` keeps pydantic-settings' given values as its one source.

In a module of its own, imported by the workloads whose model is a pydantic-settings one, so that the plain
pydantic workloads (the model proxy, the hosted model server) do not load pydantic-settings.
"""

from __future__ import annotations

from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict


class WorkloadSettings(BaseSettings):
    """A workload's settings: field names are the variables' names in lower case (any case accepted), unknown
    values ignored, the settings frozen; built from the values given (keyword arguments or
    ``model_validate``'s mapping) alone, never from ``os.environ`` or a dotenv or secrets file."""

    model_config = SettingsConfigDict(case_sensitive=False, extra="ignore", frozen=True)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """The given values only: the environment is read by the loader, with its blank-is-unset rule."""
        return (init_settings,)
