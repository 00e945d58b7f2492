"""The one way every workload loads its settings: its pydantic-settings model, from the environment, or a
:class:`~kora.core.settings_errors.SettingsError` naming every bad variable at once.

:func:`load_settings` reads the model's variables (:func:`~kora.core.settings_errors.settings_fields`: one-line
values trimmed, blank ones unset), lets the workload adjust them and report what it checks before validation
(``prepare``), validates them with the model, adds what only the values together can say (``check``) and raises
with every problem in that order, or returns the settings. The model sees those values only: a pydantic-settings
model derives from :class:`~kora.core.settings_model.WorkloadSettings`, which reads no environment of its own.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, Field, ValidationError

from kora.core.env import MIN_MAX_REQUEST_BYTES
from kora.core.settings_errors import SettingsError, describe_validation_error, settings_fields

SettingsT = TypeVar("SettingsT", bound=BaseModel)

#: A workload's own checks of its raw values (field name -> value): the problems found, as
#: ``"VARIABLE: reason"`` lines. ``prepare`` may also change the values (drop, default) before validation.
FieldCheck = Callable[[dict[str, Any]], Iterable[str]]


def load_settings(
    model: type[SettingsT],
    component: str,
    environ: Mapping[str, str] | None = None,
    *,
    env_prefix: str = "",
    overrides: Mapping[str, object] | None = None,
    prepare: FieldCheck | None = None,
    check: FieldCheck | None = None,
) -> SettingsT:
    """``model`` validated from ``environ`` (default: the process environment; variable = ``env_prefix`` + field
    name, any case), ``overrides`` (field name -> value, None meaning "not given", e.g. command-line options)
    winning. Raises :class:`~kora.core.settings_errors.SettingsError` for ``component`` listing the problems of
    ``prepare``, of validation and of ``check``, in that order."""
    env = os.environ if environ is None else environ
    fields: dict[str, Any] = dict(settings_fields(env, model.model_fields, env_prefix))
    fields.update({name: value for name, value in (overrides or {}).items() if value is not None})
    problems = list(prepare(fields)) if prepare is not None else []
    settings: SettingsT | None = None
    try:
        settings = model.model_validate(fields)
    except ValidationError as error:
        problems.extend(describe_validation_error(error, env_prefix))
    if check is not None:
        problems.extend(check(fields))
    if problems or settings is None:
        raise SettingsError(component, problems)
    return settings


def request_limit_field(default: int) -> Any:
    """The ``*_MAX_REQUEST_BYTES`` field every workload's settings declare: ``default`` bytes, at least
    :data:`~kora.core.env.MIN_MAX_REQUEST_BYTES`, enforced by :class:`~kora.core.limits.RequestLimits`."""
    return Field(
        default=default,
        ge=MIN_MAX_REQUEST_BYTES,
        description="Largest request body accepted, in bytes; a larger one is refused with 413 before it is read "
        "(see Request limits).",
    )
