"""Manifest loader: multi-document YAML, folders, problems with locations, references, order."""

import base64
import textwrap
from pathlib import Path

import pytest
import yaml

from kora.resources.graph import ResourceRef
from kora.resources.loader import ManifestError, dependency_order, load_path, load_text
from kora.resources.models import Agent

pytestmark = pytest.mark.unit

MODEL = """
apiVersion: kora.dev/v1alpha1
kind: ModelAPI
metadata: {name: llm}
spec: {mode: Scripted}
"""
TOOLS = """
apiVersion: kora.dev/v1alpha1
kind: MCPServer
metadata: {name: tools}
spec:
  config:
    toolsString: |
      def add(a: int, b: int) -> int:
          '''Add.'''
          return a + b
"""
STORE = """
apiVersion: kora.dev/v1alpha1
kind: MemoryStore
metadata: {name: mem}
spec:
  models: {summarization: {modelAPI: llm}}
"""


SECRET = """
apiVersion: v1
kind: Secret
metadata: {name: s}
stringData: {key: value}
"""


def agent_doc(name: str, *, access=(), expose=True, extra: str = "") -> str:
    return textwrap.dedent(
        f"""
        apiVersion: kora.dev/v1alpha1
        kind: Agent
        metadata: {{name: {name}}}
        spec:
          modelAPI: llm
          model: scripted
          agentNetwork: {{access: [{", ".join(access)}], expose: {str(expose).lower()}}}
        """
    ) + textwrap.indent(textwrap.dedent(extra), "  ")


def docs(*parts: str) -> str:
    return "\n---\n".join(parts)


def problems_of(text: str, **kwargs) -> list[str]:
    with pytest.raises(ManifestError) as info:
        load_text(text, "m.yaml", **kwargs)
    return [str(p) for p in info.value.problems]


def test_loads_every_kind_and_offers_typed_lookups():
    graph = load_text(docs(MODEL, TOOLS, STORE, agent_doc("helper", extra="mcpServers: [tools]\n")))
    assert [a.name for a in graph.agents] == ["helper"]
    assert graph.model_api("llm").spec.mode.value == "Scripted"
    assert graph.mcp_server("tools").name == "tools"
    assert graph.memory_store("mem").spec.models.summarization is not None
    assert isinstance(graph.agent("helper"), Agent)
    assert len(graph) == 4
    assert graph.namespaces() == ["default"]
    with pytest.raises(KeyError):
        graph.agent("nobody")


def test_empty_documents_are_skipped():
    graph = load_text("---\n" + MODEL + "\n---\n---\n")
    assert len(graph) == 1


def test_secrets_are_held_with_decoded_values():
    secret = f"""
apiVersion: v1
kind: Secret
metadata: {{name: keys}}
data: {{api: {base64.b64encode(b"from-data").decode()}, both: {base64.b64encode(b"old").decode()}}}
stringData: {{plain: from-string, both: new}}
"""
    graph = load_text(docs(MODEL, secret))
    assert graph.secret_value("keys", "api") == "from-data"
    assert graph.secret_value("keys", "plain") == "from-string"
    assert graph.secret_value("keys", "both") == "new"
    assert graph.secret_value("keys", "none") is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            docs(MODEL, agent_doc("a", extra="mcpServers: [nope]\n")),
            "m.yaml, document 2, Agent/a: spec.mcpServers[0]: no MCPServer named 'nope'",
        ),
        (docs(agent_doc("a")), "spec.modelAPI: no ModelAPI named 'llm' in namespace 'default'"),
        (docs(MODEL, agent_doc("a", access=["ghost"])), "spec.agentNetwork.access[0]: no Agent named 'ghost'"),
        (
            docs(MODEL, agent_doc("a", access=["b"]), agent_doc("b", expose=False)),
            "peer agent 'b' has agentNetwork.expose: false",
        ),
        (docs(MODEL, agent_doc("a", access=["a"])), "an agent cannot delegate to itself"),
        (
            docs(MODEL, agent_doc("a", extra="config: {memory: {type: remote, memoryStore: mem}}\n")),
            "spec.config.memory.memoryStore: no MemoryStore named 'mem'",
        ),
        (docs(STORE), "spec.models.summarization.modelAPI: no ModelAPI named 'llm'"),
        (
            docs(MODEL, MODEL),
            "document 2, ModelAPI/llm: metadata.name: duplicate ModelAPI default/llm "
            "(first defined in m.yaml, document 1)",
        ),
        (
            docs(SECRET, SECRET),
            "document 2, Secret/s: metadata.name: duplicate Secret default/s (first defined in m.yaml, document 1)",
        ),
        (
            docs(MODEL, "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"),
            "document 2, Pod/p: kind: unknown kind 'Pod'",
        ),
        ("apiVersion: kora.dev/v2\nkind: Agent\nmetadata: {name: a}\n", "apiVersion: must be kora.dev/v1alpha1"),
        ("- just\n- a list\n", "a manifest must be a mapping"),
        ("kind: [unclosed\n", "not valid YAML (line"),
        (
            docs(MODEL, agent_doc("a", extra="config: {agenticLoop: {maxStep: 3}}\n")),
            "Agent/a: spec.config.agenticLoop.maxStep: Extra inputs are not permitted",
        ),
        (
            docs(MODEL, agent_doc("a", extra="config: {env: [{name: X}]}\n")),
            "Agent/a: spec.config.env[0]: give exactly one of 'value' and 'valueFrom'",
        ),
        (
            docs(MODEL, agent_doc("a", access=["b"]), agent_doc("b", access=["c"]), agent_doc("c", access=["a"])),
            "delegation cycle",
        ),
    ],
)
def test_problems_name_file_document_resource_and_field(text, expected):
    found = problems_of(text)
    assert any(expected in p for p in found), found


def test_all_problems_are_reported_at_once():
    text = docs(agent_doc("a", extra="mcpServers: [x, y]\n"), "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n")
    assert len(problems_of(text)) == 4  # modelAPI, two mcpServers, unknown kind


def test_same_name_in_other_namespace_or_kind_is_fine():
    other_ns = MODEL.replace("{name: llm}", "{name: llm, namespace: team}")
    agent_named_llm = agent_doc("llm")
    graph = load_text(docs(MODEL, other_ns, agent_named_llm))
    assert len(graph) == 3


def secret_ref_agent(secret: str, key: str) -> str:
    return agent_doc(
        "a", extra=f"config: {{env: [{{name: TOKEN, valueFrom: {{secretKeyRef: {{name: {secret}, key: {key}}}}}}}]}}\n"
    )


def test_missing_secret_is_a_warning_unless_required():
    text = docs(MODEL, secret_ref_agent("keys", "token"))
    graph = load_text(text)
    assert any("Secret default/keys is not in the manifests" in w for w in graph.warnings)
    assert any("spec.config.env[0].valueFrom.secretKeyRef" in p for p in problems_of(text, require_secrets=True))


def test_missing_key_of_a_present_secret_is_an_error():
    secret = "apiVersion: v1\nkind: Secret\nmetadata: {name: keys}\nstringData: {other: x}\n"
    found = problems_of(docs(MODEL, secret, secret_ref_agent("keys", "token")))
    assert any("Secret default/keys has no key 'token'" in p for p in found), found


def test_secret_refs_of_model_api_and_memory_store_are_checked():
    proxy = """
apiVersion: kora.dev/v1alpha1
kind: ModelAPI
metadata: {name: llm}
spec:
  mode: Proxy
  proxyConfig: {apiBase: "http://x/v1", apiKey: {valueFrom: {secretKeyRef: {name: k, key: api}}}}
"""
    external = STORE.replace(
        "spec:\n", "spec:\n  storage: {type: external, external: {connectionSecretRef: {name: pg, key: url}}}\n"
    )
    found = problems_of(docs(proxy, external), require_secrets=True)
    assert any("spec.proxyConfig.apiKey.valueFrom.secretKeyRef" in p for p in found)
    assert any("spec.storage.external.connectionSecretRef" in p for p in found)


def test_bad_base64_in_secret_data():
    secret = "apiVersion: v1\nkind: Secret\nmetadata: {name: keys}\ndata: {k: '!!!'}\n"
    assert any("not base64" in p for p in problems_of(secret))


def test_folder_loads_yaml_and_yml_in_name_order(tmp_path: Path):
    (tmp_path / "b-agent.yml").write_text(agent_doc("helper"))
    (tmp_path / "a-model.yaml").write_text(MODEL)
    (tmp_path / "notes.txt").write_text("not a manifest")
    graph = load_path(tmp_path)
    assert [ref.kind for ref in graph.resources] == ["ModelAPI", "Agent"]


def test_folder_problems_name_the_file(tmp_path: Path):
    (tmp_path / "agent.yaml").write_text(agent_doc("helper"))
    with pytest.raises(ManifestError) as info:
        load_path(tmp_path)
    assert str(tmp_path / "agent.yaml") in str(info.value)


def test_empty_folder_and_missing_file(tmp_path: Path):
    with pytest.raises(ManifestError, match=r"no \.yaml or \.yml files"):
        load_path(tmp_path)
    with pytest.raises(ManifestError, match="cannot read"):
        load_path(tmp_path / "missing.yaml")


def test_script_file_is_resolved_against_the_manifest_folder(tmp_path: Path):
    (tmp_path / "rules.yaml").write_text("rules: []\n")
    manifest = tmp_path / "model.yaml"
    manifest.write_text(
        MODEL.replace("spec: {mode: Scripted}", "spec: {mode: Scripted, scriptedConfig: {scriptFile: rules.yaml}}")
    )
    config = load_path(manifest).model_api("llm").spec.scripted_config
    assert config is not None
    assert config.script_file == str(tmp_path / "rules.yaml")
    manifest.write_text(
        MODEL.replace("spec: {mode: Scripted}", "spec: {mode: Scripted, scriptedConfig: {scriptFile: gone.yaml}}")
    )
    with pytest.raises(ManifestError, match=r"spec.scriptedConfig.scriptFile: no such file"):
        load_path(manifest)


def test_dependency_order_puts_peers_first():
    graph = load_text(
        docs(
            agent_doc("boss", access=["mid", "leaf"]),
            agent_doc("mid", access=["leaf"]),
            agent_doc("leaf"),
            STORE,
            TOOLS,
            MODEL,
        )
    )
    order = [(ref.kind, ref.name) for ref in dependency_order(graph)]
    assert order == [
        ("ModelAPI", "llm"),
        ("MCPServer", "tools"),
        ("MemoryStore", "mem"),
        ("Agent", "leaf"),
        ("Agent", "mid"),
        ("Agent", "boss"),
    ]
    assert ResourceRef("Agent", "default", "leaf") in graph.resources


def test_cycle_is_reported_at_each_agent_and_by_dependency_order():
    from kora.resources.graph import graph_of

    text = docs(MODEL, agent_doc("a", access=["b"]), agent_doc("b", access=["a"]), agent_doc("c", access=["a"]))
    found = problems_of(text)
    assert [p.split(":")[0] for p in found if "delegation cycle" in p] == [
        "m.yaml, document 2, Agent/a",
        "m.yaml, document 3, Agent/b",
        "m.yaml, document 4, Agent/c",
    ]
    a = Agent.model_validate(yaml.safe_load(agent_doc("a", access=["b"])))
    b = Agent.model_validate(yaml.safe_load(agent_doc("b", access=["a"])))
    with pytest.raises(ManifestError, match="default/a, default/b"):
        dependency_order(graph_of(a, b))


def test_an_unknown_field_close_to_a_known_one_is_named_at_any_depth():
    text = """
apiVersion: kora.dev/v1alpha1
kind: Agent
metadata: {name: a}
spec: {modelAPI: m, model: x, mcpServer: [t], config: {memroy: {enabled: true}, env: [{name: X, vaule: "1"}]}}
---
apiVersion: kora.dev/v1alpha1
kind: ModelAPI
metadata: {name: m}
spec: {mode: Scripted}
"""
    found = problems_of(text)
    assert "Agent/a: spec.mcpServer: Extra inputs are not permitted; did you mean 'mcpServers'?" in " ".join(found)
    assert any(p.endswith("spec.config.memroy: Extra inputs are not permitted; did you mean 'memory'?") for p in found)
    assert any(
        p.endswith("spec.config.env[0].vaule: Extra inputs are not permitted; did you mean 'value'?") for p in found
    )
    # Nothing close: no guess.
    (far,) = problems_of(
        text.replace("mcpServer: [t], ", "zzzzzz: 1, ").replace("memroy", "memory").replace("vaule", "value")
    )
    assert far.endswith("spec.zzzzzz: Extra inputs are not permitted")


def test_a_reference_to_a_resource_whose_document_was_refused_reports_that_document_only():
    text = """
apiVersion: kora.dev/v1alpha1
kind: MCPServer
metadata: {name: tools}
spec: {type: python-runtime, config: {toolString: "def f(): pass"}}
---
apiVersion: kora.dev/v1alpha1
kind: ModelAPI
metadata: {name: m, namespace: team}
spec: {mode: Proxy}
---
apiVersion: kora.dev/v1alpha1
kind: Agent
metadata: {name: a, namespace: team}
spec: {modelAPI: m, model: x}
---
apiVersion: kora.dev/v1alpha1
kind: Agent
metadata: {name: b}
spec: {modelAPI: missing, model: x, mcpServers: [tools]}
"""
    found = problems_of(text)
    assert not any("no MCPServer named 'tools'" in p or "no ModelAPI named 'm'" in p for p in found), found
    assert any("MCPServer/tools: spec.config.toolString" in p for p in found)
    assert any("ModelAPI/m" in p for p in found)
    # A reference to what is not in the manifests at all is still reported.
    assert any("Agent/b: spec.modelAPI: no ModelAPI named 'missing'" in p for p in found), found
