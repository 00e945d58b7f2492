"""CRDs generated from the models: committed files are current and schemas are structural."""

from pathlib import Path

import pytest
import yaml

from kora.resources import crd
from kora.resources.models import GROUP, RESOURCE_CLASSES, VERSION

pytestmark = pytest.mark.unit

CRD_DIR = Path(__file__).resolve().parents[2] / "deploy" / "crds"


def test_committed_crds_equal_a_fresh_generation():
    assert crd.stale_files(CRD_DIR) == [], "run: python -m kora.resources.crd"
    assert sorted(p.name for p in CRD_DIR.glob("*.yaml")) == sorted(crd.render_crds())


def walk(node, path="openAPIV3Schema"):
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from walk(child, f"{path}.{name}")
    if "items" in node:
        yield from walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}{{}}")


@pytest.mark.parametrize("kind", list(RESOURCE_CLASSES))
def test_schema_is_structural(kind):
    schema = crd.crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in walk(schema):
        assert "type" in node, path
        for forbidden in ("$ref", "$defs", "anyOf", "oneOf", "allOf", "title", "const", "uniqueItems"):
            assert forbidden not in node, f"{path}: {forbidden}"
        assert not ("properties" in node and "additionalProperties" in node), path
        assert node.get("additionalProperties") is not False, path
        if "default" in node:
            assert node["default"] not in (None, "", [], {}), path


@pytest.mark.parametrize(
    ("kind", "plural", "column"),
    [
        ("Agent", "agents", "ModelAPI"),
        ("ModelAPI", "modelapis", "Mode"),
        ("MCPServer", "mcpservers", "Type"),
        ("MemoryStore", "memorystores", "Storage"),
    ],
)
def test_crd_names_status_and_printer_columns(kind, plural, column):
    document = crd.crd(kind)
    assert document["metadata"]["name"] == f"{plural}.{GROUP}"
    version = document["spec"]["versions"][0]
    assert version["name"] == VERSION
    assert version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert column in columns
    assert "Phase" in columns
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert status["properties"]["phase"]["enum"] == ["Pending", "Waiting", "Ready", "Failed"]
    assert status["x-kubernetes-preserve-unknown-fields"] is True


def test_free_form_script_rules_preserve_unknown_fields():
    schema = crd.open_api_schema("ModelAPI")
    items = schema["properties"]["spec"]["properties"]["scriptedConfig"]["properties"]["script"]["items"]
    assert items == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def test_optional_fields_are_nullable_not_any_of():
    spec = crd.open_api_schema("Agent")["properties"]["spec"]
    assert spec["properties"]["telemetry"]["nullable"] is True
    assert spec["properties"]["telemetry"]["type"] == "object"
    assert spec["required"] == ["modelAPI", "model"]


def test_cli_writes_and_checks(tmp_path, capsys):
    assert crd.main(["--check", str(tmp_path)]) == 1
    assert crd.main([str(tmp_path)]) == 0
    assert crd.main(["--check", str(tmp_path)]) == 0
    written = sorted(tmp_path.iterdir())
    assert len(written) == 4
    assert all(yaml.safe_load(p.read_text())["kind"] == "CustomResourceDefinition" for p in written)


def test_union_of_two_types_is_rejected():
    with pytest.raises(ValueError, match="union"):
        crd.structural({"anyOf": [{"type": "string"}, {"type": "integer"}]}, {})
