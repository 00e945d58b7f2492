"""``kora up --watch``: notice edits of the manifests and say which workloads a new plan restarts.

:class:`ManifestWatch` waits for changes of what ``kora up`` was given (a manifest file, or the ``*.yaml`` /
``*.yml`` files directly in a folder, as :func:`kora.resources.load_path` reads them) with ``watchfiles``
(inotify / FSEvents, polling only where neither exists) and calls back once per burst of changes. A file is
watched through its folder, so an editor that saves by writing a new file and renaming it over the old one
is seen too.

:func:`diff_plans` compares two runs' plans (:func:`kora.resources.plan_workloads`), workload by workload:
a workload restarts when what its process is started with differs (``args``, the resolved environment, the
files written to its working directory); one whose plan changed elsewhere only (its gateway route timeout,
what it waits for) keeps running. ``kora up`` keeps each workload's port across reloads, so editing one
resource never changes the URLs, and so the environments, of the others.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from watchfiles import Change, awatch

from kora.resources import MANIFEST_SUFFIXES, ResourceRef, WorkloadPlan

__all__ = ["ManifestWatch", "PlanDiff", "diff_plans"]


@dataclass(frozen=True)
class PlanDiff:
    """What a reload does, each in the new start order (``removed`` in the old one)."""

    added: tuple[ResourceRef, ...]
    removed: tuple[ResourceRef, ...]
    restarted: tuple[ResourceRef, ...]
    kept: tuple[ResourceRef, ...]

    @property
    def empty(self) -> bool:
        """Whether no process starts, stops or restarts."""
        return not (self.added or self.removed or self.restarted)

    def summary(self) -> str:
        """One line for the user: ``restarted Agent/a; started MCPServer/t; stopped Agent/b`` (or
        ``no workload changed``)."""

        def names(refs: tuple[ResourceRef, ...]) -> str:
            return ", ".join(f"{ref.kind}/{ref.name}" for ref in refs)

        parts = [
            f"{verb} {names(refs)}"
            for verb, refs in (("restarted", self.restarted), ("started", self.added), ("stopped", self.removed))
            if refs
        ]
        return "; ".join(parts) or "no workload changed"


def _launch(plan: WorkloadPlan, environment: Mapping[str, str]) -> tuple[object, ...]:
    """What a workload's process is started with; equal launches need no restart."""
    return plan.args, dict(environment), dict(plan.files)


def diff_plans(
    old: Mapping[ResourceRef, WorkloadPlan],
    old_environments: Mapping[ResourceRef, Mapping[str, str]],
    new: Mapping[ResourceRef, WorkloadPlan],
    new_environments: Mapping[ResourceRef, Mapping[str, str]],
) -> PlanDiff:
    """Compare two sets of plans and their resolved environments (``{ref: {NAME: value}}``, Secrets
    resolved, so a changed Secret value restarts the workloads that read it). Pure."""
    changed = {
        ref
        for ref in new
        if ref in old and _launch(old[ref], old_environments[ref]) != _launch(new[ref], new_environments[ref])
    }
    return PlanDiff(
        added=tuple(ref for ref in new if ref not in old),
        removed=tuple(ref for ref in old if ref not in new),
        restarted=tuple(ref for ref in new if ref in changed),
        kept=tuple(ref for ref in new if ref in old and ref not in changed),
    )


@dataclass(frozen=True)
class ManifestWatch:
    """What ``kora up PATH --watch`` watches: ``folder`` (PATH, or the folder of the file PATH), and the
    paths in it that count (:meth:`counts`): PATH itself when it is a file, else the manifest files directly in
    the folder."""

    path: Path
    folder: Path

    @classmethod
    def of(cls, path: Path) -> ManifestWatch:
        """The watch of ``path`` (a file or a folder; resolved here, so call it before the event loop)."""
        target = path.resolve()
        return cls(target, target if target.is_dir() else target.parent)

    def counts(self, _change: Change, changed: str) -> bool:
        """The ``watchfiles`` filter: whether a change of ``changed`` can change what ``kora up`` loads."""
        changed_path = Path(changed)
        if self.path == self.folder:
            return changed_path.parent == self.folder and changed_path.suffix in MANIFEST_SUFFIXES
        return changed_path == self.path

    async def run(self, on_change: Callable[[], Awaitable[None]], stop: asyncio.Event) -> None:
        """Call ``on_change()`` after each burst of changes until ``stop`` is set. Changes made while
        ``on_change`` runs are seen afterwards (one more call). Not recursive."""
        async for _changes in awatch(
            self.folder, watch_filter=self.counts, stop_event=stop, recursive=False, debounce=400
        ):
            await on_change()
