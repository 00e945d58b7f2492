"""Text every store can keep (a client's mistake is a 400, never a 500; the boundary rule of
``docs/configuration.md`` "Request limits").

JSON may carry a lone surrogate (``"\\udc80"``) or a NUL (``"\\u0000"``); Python reads both into ``str``, but
neither can be encoded as UTF-8 (a surrogate) or stored by Postgres (either), so a turn holding one would be
stored and then break every later read of its session. Each boundary that takes text from a client checks
the whole decoded body here, before any work, and refuses it as a client mistake:

* :func:`unstorable_location` (the agent's ``/v1/chat/completions`` and A2A ``POST /``): where the first bad
  string is, or ``None`` (:func:`may_hold_unstorable` tells from the raw bytes whether the walk is needed);
* :func:`check_storable_json` and :func:`check_storable_text` (the memory service's body models, as pydantic
  validators): ``ValueError`` for a bad string, a non-finite number or nesting beyond 64 levels.

Also :func:`last_line`: the line of a process's output that says why it stopped, as ``kora up`` and the operator
both quote it.

Pure functions, standard library only.
"""

from __future__ import annotations

import math
import re

#: Characters no store keeps: NUL and the UTF-16 surrogate range (never valid alone in UTF-8).
UNSTORABLE = re.compile(r"[\x00\ud800-\udfff]")
#: Control characters (C0 and DEL), refused in identifiers.
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: The message a refused string gets (the caller prefixes the field's location).
UNSTORABLE_MESSAGE = "text must not contain NUL characters or unpaired surrogates"
#: Deepest nesting :func:`check_storable_json` accepts in a stored JSON value.
MAX_STORED_DEPTH = 64


def check_storable_text(value: str) -> str:
    """``value`` itself; ``ValueError`` when it holds a NUL or an unpaired surrogate."""
    if UNSTORABLE.search(value):
        raise ValueError(UNSTORABLE_MESSAGE)
    return value


def strip_unstorable(text: str) -> str:
    """``text`` without the characters no store keeps (NUL, unpaired surrogates)."""
    return UNSTORABLE.sub("", text)


def check_storable_json(value: object, depth: int = 0) -> None:
    """Raise ``ValueError`` when a string anywhere in ``value`` (keys included) holds a NUL or a lone surrogate,
    when a number is NaN or infinite, or when it nests deeper than :data:`MAX_STORED_DEPTH` levels."""
    if depth > MAX_STORED_DEPTH:
        raise ValueError(f"JSON nests deeper than {MAX_STORED_DEPTH} levels")
    if isinstance(value, str):
        check_storable_text(value)
    elif isinstance(value, float) and not math.isfinite(value):
        raise ValueError("numbers must be finite (no NaN or Infinity)")
    elif isinstance(value, list):
        for item in value:
            check_storable_json(item, depth + 1)
    elif isinstance(value, dict):
        for key, item in value.items():
            check_storable_text(key)
            check_storable_json(item, depth + 1)


#: What a JSON body must hold for a string decoded from it to hold a NUL or a lone surrogate: a ``\u`` escape, a raw
#: NUL byte (also in every UTF-16 or UTF-32 body, whose ASCII characters carry one) or a surrogate written in UTF-8
#: (``\xed\xa0``-``\xed\xbf``, which ``json.loads`` decodes with ``surrogatepass``).
_MAY_BE_UNSTORABLE = re.compile(rb"\\u|\x00|\xed[\xa0-\xbf]")


def may_hold_unstorable(raw: bytes) -> bool:
    """False when no string ``json.loads(raw)`` gives can hold a NUL or an unpaired surrogate, so that walking the
    decoded value (:func:`unstorable_location`) can be skipped: one scan of the bytes in C, where the walk visits
    every string (~25 us for a small chat request). True means only that the walk is needed."""
    return _MAY_BE_UNSTORABLE.search(raw) is not None


def unstorable_location(value: object) -> str | None:
    """The dotted location (``messages.0.content``) of the first string in decoded JSON ``value`` (keys
    included) that holds a NUL or an unpaired surrogate; ``""`` when ``value`` itself is that string; ``None``
    when every string is storable. Iterative, so any depth the parser accepted is walked."""
    pending: list[tuple[str, object]] = [("", value)]
    while pending:
        where, item = pending.pop()
        if isinstance(item, str):
            if UNSTORABLE.search(item):
                return where
        elif isinstance(item, dict):
            for key, child in item.items():
                inner = f"{where}.{key}" if where else str(key)
                if UNSTORABLE.search(key):
                    return UNSTORABLE.sub("?", inner)
                pending.append((inner, child))
        elif isinstance(item, list):
            pending.extend((f"{where}.{index}" if where else str(index), child) for index, child in enumerate(item))
    return None


def last_line(text: str, limit: int, *, skip_prefix: str | None = None) -> str | None:
    """The last non-blank line of ``text`` (a process's output), whitespace condensed and cut to ``limit``
    characters (ending ``...``), passing over lines that start with ``skip_prefix``; None when there is none. For a
    process that crashed it is usually the reason (a traceback's exception line, a one-line startup error)."""
    for line in reversed(text.splitlines()):
        condensed = " ".join(line.split())
        if condensed and not (skip_prefix and condensed.startswith(skip_prefix)):
            return condensed if len(condensed) <= limit else condensed[: limit - 3].rstrip() + "..."
    return None
