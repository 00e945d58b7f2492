"""CustomResourceDefinitions generated from the resource models (``deploy/crds/*.yaml``).

Each CRD serves api version ``<group>/v1alpha1`` with a ``status`` subresource (``status.phase``). The
``openAPIV3Schema`` of each CRD is the pydantic JSON schema of the kind's model turned into a Kubernetes
*structural* schema: ``$ref`` inlined, ``X | None`` as ``nullable: true``, ``const`` as a one-value
``enum``, free-form objects as ``x-kubernetes-preserve-unknown-fields``, no ``title``/``additionalProperties:
false``. ``status`` also preserves unknown fields so controllers (kopf) may keep their own state there.
Cross-field rules (mode/config consistency, references) are not in the schema: the operator validates
each object with the same models and reports ``Failed`` with the reason.

Usage::

    python -m kora.resources.crd [--check] [OUT_DIR]   # default OUT_DIR: deploy/crds

``--check`` writes nothing and exits 1 when the files differ from a fresh generation.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from kora.resources.models import GROUP, RESOURCE_CLASSES, VERSION, Kind

JsonObject = dict[str, Any]

#: kind -> (plural, extra printer columns before Phase as (name, JSON path)).
_NAMES: dict[str, tuple[str, list[tuple[str, str]]]] = {
    Kind.AGENT.value: ("agents", [("ModelAPI", ".spec.modelAPI"), ("Model", ".spec.model")]),
    Kind.MODEL_API.value: ("modelapis", [("Mode", ".spec.mode")]),
    Kind.MCP_SERVER.value: ("mcpservers", [("Type", ".spec.type")]),
    Kind.MEMORY_STORE.value: ("memorystores", [("Storage", ".spec.storage.type")]),
}


def plural(kind: str) -> str:
    """The resource name (plural) of ``kind`` in the API, e.g. ``agents``. ``KeyError`` for an unknown kind."""
    return _NAMES[kind][0]


_DROPPED_KEYS = {"title", "examples", "discriminator"}
_HEADER = "# Generated from kora/resources/models.py by `python -m kora.resources.crd`. Do not edit.\n"


def _resolve(ref: str, defs: Mapping[str, JsonObject]) -> JsonObject:
    prefix = "#/$defs/"
    if not ref.startswith(prefix) or ref[len(prefix) :] not in defs:
        raise ValueError(f"unsupported $ref {ref!r}")
    return defs[ref[len(prefix) :]]


def structural(schema: JsonObject, defs: Mapping[str, JsonObject]) -> JsonObject:
    """Convert one pydantic JSON-schema node (with its ``$defs``) to a Kubernetes structural schema node.

    Raises ``ValueError`` for constructs a structural schema cannot express (a union of two non-null types).
    """
    node = dict(schema)
    if "$ref" in node:
        target = _resolve(node.pop("$ref"), defs)
        # Sibling keys (description, default) override the referenced definition's.
        node = {**target, **node}
    if "anyOf" in node:
        options = node.pop("anyOf")
        non_null = [option for option in options if option.get("type") != "null"]
        if len(non_null) != 1:
            raise ValueError(f"cannot express a union of {len(non_null)} types in a structural schema")
        inner = structural(non_null[0], defs)
        node = {**inner, **{k: v for k, v in node.items() if k != "default" or v is not None}}
        if len(non_null) < len(options):
            node["nullable"] = True
    # Empty defaults add nothing (the models apply them) and the 1.20 API server rejects `default: ""`.
    if "default" in node and node["default"] in (None, "", [], {}):
        del node["default"]
    if "const" in node:
        node["enum"] = [node.pop("const")]
    if isinstance(node.get("exclusiveMinimum"), int | float) and not isinstance(node["exclusiveMinimum"], bool):
        node["minimum"] = node["exclusiveMinimum"]
        node["exclusiveMinimum"] = True
    result: JsonObject = {}
    for key, value in node.items():
        if key in _DROPPED_KEYS or key == "$defs":
            continue
        if key == "properties":
            result[key] = {name: structural(child, defs) for name, child in value.items()}
        elif key == "items":
            result[key] = structural(value, defs)
        elif key == "additionalProperties":
            if isinstance(value, dict) and value:
                result[key] = structural(value, defs)
            # `false` is implied by pruning; `true` / `{}` becomes preserve-unknown-fields below.
        elif key == "description" and isinstance(value, str):
            result[key] = value.replace("``", "`")  # docstrings use reST literals; kubectl explain shows text
        else:
            result[key] = value
    free_form = node.get("additionalProperties") is True or node.get("additionalProperties") == {}
    if result.get("type") == "object" and "properties" not in result and ("additionalProperties" not in result):
        free_form = True
    if "type" not in result and "enum" not in result:
        free_form = True  # `Any`: anything goes
    if free_form:
        result.setdefault("type", "object")
        result["x-kubernetes-preserve-unknown-fields"] = True
    if "enum" in result and "type" not in result:
        result["type"] = "string"
    return result


def open_api_schema(kind: str) -> JsonObject:
    """The ``openAPIV3Schema`` of ``kind`` (``KeyError`` for an unknown kind)."""
    model = RESOURCE_CLASSES[kind]
    schema = model.model_json_schema(by_alias=True, mode="validation")
    defs: Mapping[str, JsonObject] = schema.get("$defs", {})
    properties = schema["properties"]
    spec = structural(properties["spec"], defs)
    status = structural(properties["status"], defs)
    status.pop("nullable", None)
    status["x-kubernetes-preserve-unknown-fields"] = True
    return {
        "description": (model.__doc__ or kind).strip().splitlines()[0].replace("``", "`"),
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
    }


def crd(kind: str) -> JsonObject:
    """The CustomResourceDefinition of ``kind`` as a plain mapping."""
    plural, columns = _NAMES[kind]
    printer: list[JsonObject] = [{"name": name, "type": "string", "jsonPath": path} for name, path in columns]
    printer += [
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        {"name": "Endpoint", "type": "string", "jsonPath": ".status.endpoint", "priority": 1},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}", "labels": {"app.kubernetes.io/part-of": "kora"}},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "categories": ["kora"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": printer,
                    "schema": {"openAPIV3Schema": open_api_schema(kind)},
                }
            ],
        },
    }


def render_crds() -> dict[str, str]:
    """File name -> YAML text of every CRD, e.g. ``{"kora.dev_agents.yaml": "..."}``."""
    files: dict[str, str] = {}
    for kind in RESOURCE_CLASSES:
        plural = _NAMES[kind][0]
        text = yaml.safe_dump(crd(kind), sort_keys=False, width=120, allow_unicode=True)
        files[f"{GROUP}_{plural}.yaml"] = _HEADER + text
    return files


def stale_files(out_dir: Path) -> list[str]:
    """Names of CRD files in ``out_dir`` that are missing or differ from a fresh generation."""
    return [
        name
        for name, text in render_crds().items()
        if not (out_dir / name).is_file() or (out_dir / name).read_text(encoding="utf-8") != text
    ]


def write_crds(out_dir: Path) -> list[Path]:
    """Write every CRD into ``out_dir`` (created if needed); returns the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in render_crds().items():
        path = out_dir / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m kora.resources.crd [--check] [OUT_DIR]``: exit 0, or 1 when ``--check`` finds stale files."""
    args = list(sys.argv[1:] if argv is None else argv)
    check = "--check" in args
    rest = [arg for arg in args if arg != "--check"]
    out_dir = Path(rest[0]) if rest else Path("deploy/crds")
    if check:
        stale = stale_files(out_dir)
        for name in stale:
            print(f"{out_dir / name}: out of date; run python -m kora.resources.crd", file=sys.stderr)
        return 1 if stale else 0
    for path in write_crds(out_dir):
        print(path)
    return 0


if __name__ == "__main__":  # pragma: no cover - exercised through the tests' call of main()
    raise SystemExit(main())
