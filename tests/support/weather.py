"""The client-side tool the OpenAI-surface tests give the agent, ``get_weather(city)``, in both APIs' shapes, and
the scripted model's rule that calls it for a prompt asking for "weather in <city>"."""

from __future__ import annotations

from kora.scripted import Match, Rule, ToolCall, ToolCallReply

#: The tool's JSON schema of arguments.
PARAMETERS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
#: The tool as a Responses API function tool.
RESPONSES_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": PARAMETERS,
}
#: The tool as a Chat Completions function tool.
CHAT_TOOL = {
    "type": "function",
    "function": {"name": "get_weather", "description": "The weather in a city.", "parameters": PARAMETERS},
}
#: The model calls the tool for "weather in <city>" when the request offers it, before any tool result.
CALLS_WEATHER = Rule(
    Match(user_matches=r"weather in (?P<city>\w+)", tool_available="get_weather", after_tool=False),
    ToolCallReply([ToolCall("get_weather", {"city": "{city}"})]),
)
