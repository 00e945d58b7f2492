"""Parse manifests (a YAML file, a folder of them, or a string) into a validated :class:`ResourceGraph`.

The one place where manifests become typed resources, used by ``kora up`` and the tests. Every problem
found is collected and raised together as one :class:`ManifestError`, each naming the file, the
document (1-based position in its file), the resource (``Kind/name``), the field path (dotted, camelCase
as written in YAML, list items as ``[i]``) and the reason.

Rules beyond each model's own validation:

1. Documents are ``kora.dev/v1alpha1`` (or ``kaos.tools/v1alpha1``) Agent, ModelAPI, MCPServer,
   MemoryStore, or ``v1`` Secret / ConfigMap. Anything else is an error; empty documents are skipped.
2. Names are unique per kind and namespace.
3. References resolve within the resource's namespace: an Agent's ``modelAPI``, ``mcpServers``,
   ``agentNetwork.access`` peers and ``config.memory.memoryStore``; a MemoryStore's
   ``models.summarization`` and ``models.embedding`` ``modelAPI``. A peer must have
   ``agentNetwork.expose: true``; an agent may not list itself.
4. ``agentNetwork.access`` has no cycles (each peer must be Ready first, so a cycle would never start).
5. ``secretKeyRef``: a Secret that is not in the manifests is a *warning* (``graph.warnings``; it may live
   in the cluster, or ``kora up`` may be given it separately) unless ``require_secrets=True`` makes it an
   error; a key missing from a Secret that *is* in the manifests is always an error.
6. ``ModelAPI.spec.scriptedConfig.scriptFile``: a relative path is resolved against the manifest file's
   folder (the current directory for strings) and rewritten as an absolute path; the file must exist.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from kora.core.errors import ManifestError
from kora.resources.graph import (
    ConfigMap,
    ResourceGraph,
    ResourceRef,
    Secret,
    ref_of,
    references_of,
    secret_refs_of,
)
from kora.resources.models import (
    ACCEPTED_API_VERSIONS,
    API_VERSION,
    RESOURCE_CLASSES,
    Agent,
    AnyResource,
    Kind,
    ModelAPI,
)

__all__ = [
    "MANIFEST_SUFFIXES",
    "ManifestError",
    "Problem",
    "dependency_order",
    "describe_resource_error",
    "load_path",
    "load_text",
    "resource_problems",
]

#: The files of a folder :func:`load_path` reads.
MANIFEST_SUFFIXES = (".yaml", ".yml")
_CORE_KINDS: dict[str, type[Secret] | type[ConfigMap]] = {"Secret": Secret, "ConfigMap": ConfigMap}


@dataclass(frozen=True)
class Problem:
    """One problem in the manifests. ``document`` is 1-based (0: the whole source, e.g. an empty folder)."""

    source: str
    document: int
    resource: str
    path: str
    reason: str

    def __str__(self) -> str:
        where = [self.source]
        if self.document:
            where.append(f"document {self.document}")
        if self.resource:
            where.append(self.resource)
        location = ", ".join(where)
        return f"{location}: {self.path}: {self.reason}" if self.path else f"{location}: {self.reason}"


@dataclass(frozen=True)
class _Document:
    source: str
    index: int
    base_dir: Path
    body: object


def _field_path(loc: Iterable[int | str]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path


def _reason(error: Mapping[str, Any]) -> str:
    message = str(error["msg"])
    return message.removeprefix("Value error, ")


def _named_resource(body: object) -> ResourceRef | None:
    """The resource a refused document names (kind and metadata.name, namespace ``default`` unless given); None
    when it names none."""
    if not isinstance(body, Mapping) or body.get("kind") not in RESOURCE_CLASSES:
        return None
    metadata = body.get("metadata")
    if not isinstance(metadata, Mapping) or not isinstance(metadata.get("name"), str):
        return None
    namespace = metadata.get("namespace")
    return ResourceRef(
        str(body["kind"]), namespace if isinstance(namespace, str) and namespace else "default", metadata["name"]
    )


def _label(body: Mapping[str, Any]) -> str:
    kind = body.get("kind")
    metadata = body.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    return f"{kind or '?'}/{name or '?'}"


def _parse_yaml(text: str, source: str, base_dir: Path, problems: list[Problem]) -> list[_Document]:
    documents: list[_Document] = []
    try:
        for index, body in enumerate(yaml.safe_load_all(text), start=1):
            documents.append(_Document(source, index, base_dir, body))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error)
        problems.append(Problem(source, len(documents) + 1, "", "", f"not valid YAML{where}: {problem}"))
    return documents


def _validate_document(doc: _Document, problems: list[Problem]) -> AnyResource | Secret | ConfigMap | None:
    body = doc.body
    if not isinstance(body, Mapping):
        problems.append(Problem(doc.source, doc.index, "", "", "a manifest must be a mapping with apiVersion and kind"))
        return None
    label = _label(body)
    kind, api_version = body.get("kind"), body.get("apiVersion")
    if kind in RESOURCE_CLASSES and api_version not in ACCEPTED_API_VERSIONS:
        problems.append(
            Problem(doc.source, doc.index, label, "apiVersion", f"must be {API_VERSION} (got {api_version!r})")
        )
        return None
    if kind not in RESOURCE_CLASSES and (kind not in _CORE_KINDS or api_version != "v1"):
        known = ", ".join([*RESOURCE_CLASSES, "Secret (v1)", "ConfigMap (v1)"])
        problems.append(
            Problem(doc.source, doc.index, label, "kind", f"unknown kind {kind!r} ({api_version!r}); expected {known}")
        )
        return None
    try:
        if kind in RESOURCE_CLASSES:
            return RESOURCE_CLASSES[str(kind)].model_validate(body)
        return _CORE_KINDS[str(kind)].model_validate(body)
    except ValidationError as error:
        model: type[BaseModel] = RESOURCE_CLASSES[str(kind)] if kind in RESOURCE_CLASSES else _CORE_KINDS[str(kind)]
        for item in error.errors(include_url=False):
            reason = _reason(item)
            if item["type"] == "extra_forbidden":
                reason += _did_you_mean(model, item["loc"])
            problems.append(Problem(doc.source, doc.index, label, _field_path(item["loc"]), reason))
        return None


def _did_you_mean(model: type[BaseModel], loc: Sequence[int | str]) -> str:
    """``"; did you mean 'memory'?"`` for an unknown field at ``loc`` close to a field ``model`` has there (the
    wire names: camelCase), else ``""``."""
    known = _fields_at(model, loc[:-1])
    close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6) if loc else []
    return f"; did you mean {close[0]!r}?" if close else ""


def _fields_at(annotation: object, path: Sequence[int | str]) -> list[str]:
    """The wire names of the fields of the model found at ``path`` from ``annotation`` (a model class or a type
    holding one: optional, list, dict, Annotated); ``[]`` when there is none."""
    for part in path:
        annotation = _step(annotation, part)
        if annotation is None:
            return []
    model = _model_of(annotation)
    if model is None:
        return []
    return [field.alias or name for name, field in model.model_fields.items()]


def _step(annotation: object, part: int | str) -> object | None:
    """The type found under ``part`` (a field's wire name, a dict key or a list index) of ``annotation``."""
    for option in _options(annotation):
        origin = get_origin(option)
        if isinstance(part, int) and origin in (list, tuple, Sequence):
            item: object = get_args(option)[0]
            return item
        if isinstance(part, str) and origin in (dict, Mapping):
            value: object = get_args(option)[1]
            return value
        model = _model_of(option)
        if isinstance(part, str) and model is not None:
            for name, field in model.model_fields.items():
                if part in (name, field.alias):
                    return field.annotation
    return None


def _options(annotation: object) -> list[object]:
    """``annotation`` without ``Annotated`` and split into the members of a union (``X | None``)."""
    if get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if get_origin(annotation) in (Union, UnionType):
        return [option for member in get_args(annotation) for option in _options(member)]
    return [annotation]


def _model_of(annotation: object) -> type[BaseModel] | None:
    for option in _options(annotation):
        if isinstance(option, type) and issubclass(option, BaseModel):
            return option
    return None


def resource_problems(body: object, source: str = "request") -> list[Problem]:
    """Every problem the models find in one resource ``body`` (a mapping as the API server holds it), worded as
    ``kora up`` words them; ``[]`` when it is valid. Cross-resource rules (references, cycles) are not checked:
    they need the whole graph (:func:`load_text`)."""
    problems: list[Problem] = []
    _validate_document(_Document(source, 0, Path.cwd(), body), problems)
    return problems


def describe_resource_error(error: ValidationError) -> str:
    """A model's ``ValidationError`` for one resource as one line: ``field.path: reason; ...``."""
    return "; ".join(
        f"{_field_path(item['loc'])}: {_reason(item)}" if item["loc"] else _reason(item)
        for item in error.errors(include_url=False)
    )


def _resolve_script_file(resource: ModelAPI, doc: _Document, problems: list[Problem]) -> None:
    config = resource.spec.scripted_config
    if config is None or config.script_file is None:
        return
    path = Path(config.script_file).expanduser()
    if not path.is_absolute():
        path = doc.base_dir / path
    path = path.resolve()
    if not path.is_file():
        problems.append(
            Problem(
                doc.source,
                doc.index,
                _label(doc.body) if isinstance(doc.body, Mapping) else "",
                "spec.scriptedConfig.scriptFile",
                f"no such file: {path}",
            )
        )
    config.script_file = str(path)


def _check_graph(
    graph: ResourceGraph,
    origin: Mapping[ResourceRef, _Document],
    require_secrets: bool,
    problems: list[Problem],
    invalid: frozenset[ResourceRef] = frozenset(),
) -> None:
    """Reference and Secret checks over ``graph``. A reference to one of ``invalid`` (resources in the manifests
    whose document was refused) is not reported: that document's own problems are the cause."""

    def report(ref: ResourceRef, path: str, reason: str) -> None:
        doc = origin[ref]
        problems.append(Problem(doc.source, doc.index, f"{ref.kind}/{ref.name}", path, reason))

    for resource in graph:
        ref = ref_of(resource)
        for path, target in references_of(resource):
            found = graph.get(target)
            if found is None and target in invalid:
                continue
            if found is None:
                report(ref, path, f"no {target.kind} named {target.name!r} in namespace {target.namespace!r}")
            elif target == ref:
                report(ref, path, "an agent cannot delegate to itself")
            elif isinstance(found, Agent) and not found.spec.agent_network.expose:
                report(ref, path, f"peer agent {target.name!r} has agentNetwork.expose: false, so it cannot be called")
        for path, secret_name, key in secret_refs_of(resource):
            secret = graph.secret(secret_name, ref.namespace)
            if secret is None:
                message = f"Secret {ref.namespace}/{secret_name} is not in the manifests"
                if require_secrets:
                    report(ref, path, message)
                else:
                    graph.warnings.append(f"{ref}: {path}: {message} (it must exist where the workload runs)")
            elif key not in secret.values():
                report(ref, path, f"Secret {ref.namespace}/{secret_name} has no key {key!r}")


def _build(documents: Iterable[_Document], require_secrets: bool, problems: list[Problem]) -> ResourceGraph:
    graph = ResourceGraph()
    origin: dict[ResourceRef, _Document] = {}
    first_seen: dict[tuple[str, str, str], _Document] = {}  # every kind, Secrets and ConfigMaps included
    invalid: set[ResourceRef] = set()  # resources whose document was refused
    for doc in documents:
        if doc.body is None:  # an empty document, e.g. a trailing '---'
            continue
        item = _validate_document(doc, problems)
        if item is None:
            if (refused := _named_resource(doc.body)) is not None:
                invalid.add(refused)
            continue
        kind, namespace, name = item.kind, item.metadata.namespace, item.metadata.name
        first = first_seen.setdefault((kind, namespace, name), doc)
        if first is not doc:
            problems.append(
                Problem(
                    doc.source,
                    doc.index,
                    f"{kind}/{name}",
                    "metadata.name",
                    f"duplicate {kind} {namespace}/{name} (first defined in {first.source}, document {first.index})",
                )
            )
            continue
        if isinstance(item, Secret):
            graph.secrets[(namespace, name)] = item
            continue
        if isinstance(item, ConfigMap):
            graph.config_maps[(namespace, name)] = item
            continue
        ref = ref_of(item)
        if isinstance(item, ModelAPI):
            _resolve_script_file(item, doc, problems)
        origin[ref] = doc
        graph.resources[ref] = item
    _check_graph(graph, origin, require_secrets, problems, frozenset(invalid))
    _, stuck = _agent_order(graph)
    for ref in stuck:
        doc = origin[ref]
        problems.append(
            Problem(
                doc.source,
                doc.index,
                f"{ref.kind}/{ref.name}",
                "spec.agentNetwork.access",
                "delegation cycle: this agent is in or waits on a cycle of peers and would never be Ready",
            )
        )
    if problems:
        # Reference and cycle checks run after every document was read; report in document order.
        ordered: list[Problem] = sorted(problems, key=lambda problem: (problem.source, problem.document))
        raise ManifestError(ordered)
    return graph


def load_text(
    text: str,
    source: str = "<string>",
    *,
    base_dir: str | os.PathLike[str] | None = None,
    require_secrets: bool = False,
) -> ResourceGraph:
    """Parse and validate a (multi-document) YAML string. ``base_dir`` resolves relative ``scriptFile``s.

    Raises :class:`ManifestError` listing every problem.
    """
    problems: list[Problem] = []
    documents = _parse_yaml(text, source, Path(base_dir or Path.cwd()), problems)
    return _build(documents, require_secrets, problems)


def load_path(path: str | os.PathLike[str], *, require_secrets: bool = False) -> ResourceGraph:
    """Parse and validate a YAML file or every ``*.yaml`` / ``*.yml`` file of a folder (not recursive).

    Files of a folder are read in name order; all their documents form one graph. Raises
    :class:`ManifestError` listing every problem (an unreadable path or a folder without manifests too).
    """
    root = Path(path)
    problems: list[Problem] = []
    if root.is_dir():
        files = sorted(p for p in root.iterdir() if p.is_file() and p.suffix in MANIFEST_SUFFIXES)
        if not files:
            raise ManifestError([Problem(str(root), 0, "", "", "folder holds no .yaml or .yml files")])
    else:
        files = [root]
    documents: list[_Document] = []
    for file in files:
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            problems.append(Problem(str(file), 0, "", "", f"cannot read: {error}"))
            continue
        documents += _parse_yaml(text, str(file), file.parent, problems)
    return _build(documents, require_secrets, problems)


def dependency_order(graph: ResourceGraph) -> list[ResourceRef]:
    """A start order: ModelAPIs, MCPServers, MemoryStores (manifest order), then Agents peers-first.

    Agents are ordered topologically by ``agentNetwork.access`` (a peer starts before the agents that
    call it; ties keep manifest order). Raises :class:`ManifestError` naming the agents of any cycle.
    """
    order = [ref_of(r) for r in graph.model_apis]
    order += [ref_of(r) for r in graph.mcp_servers]
    order += [ref_of(r) for r in graph.memory_stores]
    agents, stuck = _agent_order(graph)
    if stuck:
        names = ", ".join(f"{ref.namespace}/{ref.name}" for ref in stuck)
        raise ManifestError(
            [Problem("<graph>", 0, "", "spec.agentNetwork.access", f"delegation cycle; never Ready: {names}")]
        )
    return order + agents


def _agent_order(graph: ResourceGraph) -> tuple[list[ResourceRef], list[ResourceRef]]:
    """Agents peers-first (Kahn's algorithm, manifest order on ties) and the agents left over by a cycle."""
    pending = {
        ref_of(agent): {
            ResourceRef(Kind.AGENT.value, agent.metadata.namespace, peer)
            for peer in agent.spec.agent_network.access
            # Self-references are reported by the loader's reference check, not as a cycle.
            if peer != agent.metadata.name
            and ResourceRef(Kind.AGENT.value, agent.metadata.namespace, peer) in graph.resources
        }
        for agent in graph.agents
    }
    order: list[ResourceRef] = []
    while pending:
        ready = [ref for ref, needs in pending.items() if not needs]
        if not ready:
            break
        for ref in ready:
            order.append(ref)
            del pending[ref]
        for needs in pending.values():
            needs.difference_update(ready)
    return order, list(pending)
