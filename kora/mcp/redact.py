"""Keep secret values out of error texts, tracebacks, logs and the tool listing.

Secrets reach inline tools as environment variables (the operator maps ``spec.config.env`` entries, plain
values or ``valueFrom.secretKeyRef``). The server cannot tell which variables came from a Secret, so it
treats two kinds of variables as secret:

1. every variable whose *name* looks secret (``KEY``, ``TOKEN``, ``SECRET``, ``PASSW``, ``CREDENTIAL``,
   ``AUTH``, ``DSN``, ``CONNECTION``, ``PRIVATE``, ``CERT``, ``SESSION``, ``COOKIE``), and
2. every variable a tool has *read* (:class:`RecordingEnviron` notes each read of ``os.environ``,
   ``os.getenv`` and ``os.environ.get``), because a tool that reads ``MY_API`` almost always reads it to use it.

Well-known system variables (``PATH``, ``HOME``, ``LANG``, ...) and values shorter than
:data:`MIN_SECRET_LENGTH` characters are never redacted: replacing ``/root`` or ``1`` everywhere would
garble messages without protecting anything. Each secret value is replaced in its plain, ``repr``-escaped,
JSON-escaped and URL-quoted forms, since an exception message may show any of them
(``KeyError: 'x'``, ``https://user:p%40ss@host``).

This module uses only the standard library: the tool worker processes import it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, MutableMapping
from urllib.parse import quote, quote_plus

from kora.core.errors import MissingEnvironmentVariable

#: What a secret value is replaced with.
MASK = "***"
#: Values shorter than this are not treated as secrets (see the module docstring).
MIN_SECRET_LENGTH = 4

_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|DSN|CONNECTION|PRIVATE|CERT|SESSION|COOKIE", re.I)
_NOT_SECRET = frozenset(
    {
        "PATH", "HOME", "PWD", "OLDPWD", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "LANGUAGE", "TZ",
        "HOSTNAME", "TMPDIR", "TEMP", "TMP", "VIRTUAL_ENV", "SHLVL", "_", "MCP_TOOLS_STRING",
    }
)  # fmt: skip
_NOT_SECRET_PREFIXES = ("LC_", "PYTHON", "KUBERNETES_", "KORA_")


def looks_secret(name: str) -> bool:
    """True when variable ``name`` is secret by its name alone (rule 1 of the module docstring)."""
    return is_redactable(name) and bool(_SECRET_NAME.search(name))


def is_redactable(name: str) -> bool:
    """False for well-known system variables whose values are never secrets (``PATH``, ``LC_*``, ...)."""
    upper = name.upper()
    return upper not in _NOT_SECRET and not upper.startswith(_NOT_SECRET_PREFIXES)


def _forms(value: str) -> set[str]:
    """The spellings of ``value`` an error text may contain."""
    forms = {value, repr(value)[1:-1], json.dumps(value)[1:-1], quote(value, safe=""), quote_plus(value)}
    return {form for form in forms if len(form) >= MIN_SECRET_LENGTH}


class Redactor:
    """Replaces the values of secret environment variables with :data:`MASK` in any text.

    ``environ`` is read at each :meth:`redact` call, so values set after construction are covered.
    Call :meth:`mark_read` for variables a tool read; variables secret by their name alone need no call.
    """

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = environ
        self._read: set[str] = set()

    def mark_read(self, name: str) -> None:
        """Treat variable ``name`` as secret from now on (a tool read it)."""
        if is_redactable(name):
            self._read.add(name)

    def secret_values(self) -> list[str]:
        """Every spelling of every secret value, longest first (so a longer secret is masked whole)."""
        values: set[str] = set()
        for name, value in list(self._environ.items()):
            if len(value) >= MIN_SECRET_LENGTH and (name in self._read or looks_secret(name)):
                values |= _forms(value)
        return sorted(values, key=len, reverse=True)

    def redact(self, text: str) -> str:
        """``text`` with every secret value replaced by :data:`MASK`."""
        for value in self.secret_values():
            if value in text:
                text = text.replace(value, MASK)
        return text

    def redact_json(self, data: object) -> object:
        """A copy of a JSON-like structure (dicts, lists, strings) with secret values masked in every string."""
        if isinstance(data, str):
            return self.redact(data)
        if isinstance(data, dict):
            return {key: self.redact_json(item) for key, item in data.items()}
        if isinstance(data, list):
            return [self.redact_json(item) for item in data]
        return data


class RecordingEnviron(MutableMapping[str, str]):
    """A stand-in for ``os.environ`` that tells a :class:`Redactor` about every variable read.

    Installed as ``os.environ`` while tool code runs; ``os.getenv`` reads through it too (it looks up the
    module global). Writes go to the real environment. A missing variable raises
    :class:`MissingEnvironmentVariable` (a ``KeyError``) with a hint instead of a bare ``KeyError: 'NAME'``.
    """

    def __init__(self, real: MutableMapping[str, str], redactor: Redactor) -> None:
        self._real = real
        self._redactor = redactor

    def __getitem__(self, name: str) -> str:
        self._redactor.mark_read(name)
        try:
            return self._real[name]
        except KeyError:
            raise MissingEnvironmentVariable(name) from None

    def __setitem__(self, name: str, value: str) -> None:
        self._real[name] = value

    def __delitem__(self, name: str) -> None:
        del self._real[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._real)

    def __len__(self) -> int:
        return len(self._real)

    def __repr__(self) -> str:
        # repr() shows every value: count them all as read so they are masked wherever the text ends up.
        for name in self._real:
            self._redactor.mark_read(name)
        return repr(self._real)

    def copy(self) -> dict[str, str]:
        """A plain dict copy (what ``os.environ.copy()`` returns); counts every variable as read."""
        for name in self._real:
            self._redactor.mark_read(name)
        return dict(self._real)
