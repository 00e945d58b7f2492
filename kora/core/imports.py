"""Import a module as if some optional packages were not installed (:func:`import_without`).

Some libraries import their optional extras whenever those are installed, in a package ``__init__`` that a user of
another part cannot avoid: the a2a-sdk imports its gRPC handler (``grpc``, ~15 MB) from
``a2a.server.request_handlers`` and its database task store (SQLAlchemy, ~16 MB) from ``a2a.server.tasks``, and
httpx its command-line client (``rich``, ``pygments``, ~2 MB) from ``httpx``; FastAPI imports ``pydantic.v1``
(~2 MB) to ask whether a route's types are pydantic v1 models. Each library already handles the extra being absent
(a placeholder that raises when used, no command-line client, "not a v1 model"), so a process that does not use an
extra runs the import (:func:`import_without`) or the code (:func:`modules_absent`) with the extra made
unimportable for the duration, and never holds it.

:class:`DeferredImport` imports a module on its first use, off the event loop: a server that must answer before a
heavy package loads names the module that brings it, and only a request that needs it waits for it.
"""

from __future__ import annotations

import asyncio
import importlib
import sys
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType

__all__ = ["DeferredImport", "import_without", "modules_absent"]


class _Absent(MetaPathFinder):
    """Refuses every module of ``packages`` (dotted names: ``grpc`` refuses ``grpc`` and ``grpc.aio``,
    ``pydantic.v1`` refuses ``pydantic.v1`` and below but not ``pydantic``) imported by thread ``thread``; others
    pass through (another thread's imports meanwhile are not affected)."""

    def __init__(self, packages: frozenset[str], thread: int) -> None:
        self.packages, self.thread = packages, thread

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        """Raise :class:`ModuleNotFoundError` for a refused module (as when it is not installed); ``None``
        otherwise (the next finder looks it up)."""
        if threading.get_ident() == self.thread and any(
            fullname == name or fullname.startswith(name + ".") for name in self.packages
        ):
            raise ModuleNotFoundError(f"No module named {fullname!r} (not used by this process)", name=fullname)
        return None


@contextmanager
def modules_absent(absent: Iterable[str]) -> Iterator[None]:
    """While the block runs, this thread cannot import the packages or modules ``absent`` (dotted names; a
    package's submodules with it): an import raises :class:`ModuleNotFoundError` as when they are not installed.
    One already imported is not refused (this process uses it; refusing its submodules could break it). Other
    threads, and later imports, are not affected."""
    packages = frozenset(name for name in absent if name not in sys.modules)
    if not packages:
        yield
        return
    finder = _Absent(packages, threading.get_ident())
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


def import_without(module: str, absent: Iterable[str]) -> ModuleType:
    """Import ``module`` (``importlib.import_module``) while the packages ``absent`` cannot be imported by this
    thread (:func:`modules_absent`), so that ``module`` takes the path it takes when they are not installed.
    Later imports of the packages work as usual. Raises what the import raises."""
    with modules_absent(absent):
        return importlib.import_module(module)


class DeferredImport:
    """The module named ``name``, imported on the first :meth:`load` (by name, so no import graph holds the
    importer to it) while the packages ``absent`` cannot be imported (:func:`import_without`)."""

    def __init__(self, name: str, absent: Iterable[str] = ()) -> None:
        self.name = name
        self._absent = tuple(absent)
        self._module: ModuleType | None = None

    async def load(self) -> ModuleType:
        """The module, imported in a worker thread the first time so that the event loop goes on serving
        meanwhile (callers that come while it imports wait for the same import: Python's import lock). Raises
        what the import raises."""
        if self._module is None:
            self._module = await asyncio.to_thread(import_without, self.name, self._absent)
        return self._module
