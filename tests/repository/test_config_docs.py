"""docs/configuration.md is generated from the settings models (scripts/gen_config_docs.py) and kept fresh."""

from typing import Literal

import pytest
from pydantic import BaseModel, Field

from kora.agent.settings import NAMED_VARIABLES, AgentSettings, load_agent_settings
from kora.core import env
from kora.hosted.settings import ENV_PREFIX as HOSTED_PREFIX
from kora.hosted.settings import HostedSettings
from kora.mcp.settings import McpSettings
from kora.operator.settings import VARIABLES as OPERATOR_VARIABLES
from kora.operator.settings import OperatorSettings
from kora.proxy.model_proxy import ENV_PREFIX as PROXY_PREFIX
from kora.proxy.model_proxy import ProxySettings
from scripts import gen_config_docs as gen

pytestmark = pytest.mark.unit


def test_committed_doc_matches_the_settings_models():
    committed = gen.DOC.read_text(encoding="utf-8")
    assert gen.render_doc(committed) == committed, f"docs/configuration.md is stale: run {gen.COMMAND}"


def test_every_variable_of_every_workload_has_a_row():
    doc = gen.DOC.read_text(encoding="utf-8")
    fields = [name for model in (AgentSettings, McpSettings, OperatorSettings) for name in model.model_fields]
    documented = {name.upper() for name in fields} - {"MCP_SERVER_URLS", "SUB_AGENT_URLS", "ROUTE_TIMEOUTS"}
    documented |= {PROXY_PREFIX + name.upper() for name in ProxySettings.model_fields}
    documented |= {HOSTED_PREFIX + name.upper() for name in HostedSettings.model_fields}
    documented |= {var.name for var in (*NAMED_VARIABLES, *OPERATOR_VARIABLES)}
    for name in documented:
        assert f"| `{name}` |" in doc, name
    assert {var.name for var in NAMED_VARIABLES} == {"MCP_SERVER_<NAME>_URL", "PEER_AGENT_<NAME>_CARD_URL"}


def test_resolved_fields_are_not_listed_as_variables():
    # They are filled from MCP_SERVER_<NAME>_URL / PEER_AGENT_<NAME>_CARD_URL; the loader ignores a variable
    # named after them, so the doc must not offer one.
    names = [var.name for var in gen.model_variables(AgentSettings)]
    assert "MCP_SERVER_URLS" not in names
    assert "SUB_AGENT_URLS" not in names
    ignored = load_agent_settings(
        {"AGENT_NAME": "a", "MODEL_API_URL": "http://m/v1", "MODEL_NAME": "m"} | {"MCP_SERVER_URLS": "{}"}
    )
    assert ignored.mcp_server_urls == {}


class _Sample(BaseModel):
    port: int = Field(default=80, ge=1, le=65535, description="Port.")
    ratio: float = Field(default=0.5, gt=0, description="Ratio.")
    mode: Literal["fast", "careful"] = Field(default="fast", description="Mode.")
    level: Literal["low", "high"] | None = Field(default=None, description="Level.")
    endpoint: str = Field(description="Where.", examples=["http://x:1"], json_schema_extra={"format": "uri"})
    enabled: bool = Field(default=True, description="On | off.")


def test_rows_show_bounds_choices_defaults_and_examples():
    rows = {var.name: var for var in gen.model_variables(_Sample)}
    assert (rows["PORT"].type, rows["PORT"].default, rows["PORT"].required) == ("int 1-65535", "`80`", "no")
    assert (rows["RATIO"].type, rows["RATIO"].default) == ("float > 0", "`0.5`")
    # Choices keep their order, except in an optional (typing may have cached the union in another order).
    assert (rows["MODE"].type, rows["MODE"].default) == ("fast/careful", "`fast`")
    assert (rows["LEVEL"].type, rows["LEVEL"].default) == ("high/low", "unset")
    assert (rows["ENDPOINT"].type, rows["ENDPOINT"].default, rows["ENDPOINT"].required) == ("URL", "", "yes")
    assert rows["ENDPOINT"].description == "Where. Example: `http://x:1`."
    assert rows["ENABLED"].default == "`true`"
    # A "|" inside a cell is escaped so the row keeps its five columns.
    assert "| On \\| off. |" in gen.render_table([rows["ENABLED"]])


def test_a_field_without_description_is_an_error_naming_it():
    class Undocumented(BaseModel):
        documented: int = Field(default=1, description="Yes.")
        forgotten: int = 2

    with pytest.raises(ValueError, match=r"Undocumented\.forgotten has no Field\(description=\.\.\.\)"):
        gen.model_variables(Undocumented)


def test_blocks_must_match_the_workloads():
    workload = gen.Workload("only", None, (env.VariableDoc("X", "string", "An x."),))
    fresh = gen.render_doc("intro\n<!-- BEGIN GENERATED only -->\nold\n<!-- END GENERATED only -->\nend\n", [workload])
    assert fresh.startswith("intro\n<!-- BEGIN GENERATED only -->\n| variable |")
    assert "| `X` | string |  | no | An x. |\n<!-- END GENERATED only -->\nend\n" in fresh
    with pytest.raises(ValueError, match="no block 'only'"):
        gen.render_doc("nothing generated here\n", [workload])
    stray = "<!-- BEGIN GENERATED other -->\n<!-- END GENERATED other -->\n"
    with pytest.raises(ValueError, match="block 'other' belongs to no workload"):
        gen.render_doc(fresh + stray, [workload])
