// The AG-UI protocol's own TypeScript client (`@ag-ui/client`'s HttpAgent, which checks every event it reads
// against the protocol's rules) against a Kora agent's POST /ag-ui (tests/integration/test_ag_ui_node.py runs
// it): a server tool call, then a frontend tool whose result the next run answers from. Prints one JSON object.
import { HttpAgent } from "@ag-ui/client";

const [url, threadId] = process.argv.slice(2);
const weather = {
  name: "get_weather",
  description: "The weather in a city.",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
};

const agent = new HttpAgent({ url, threadId });

async function run(text, tools) {
  if (text) agent.addMessage({ id: `u-${agent.messages.length}`, role: "user", content: text });
  const events = [];
  const { result, newMessages } = await agent.runAgent({ tools }, { onEvent: ({ event }) => events.push(event) });
  return { types: events.map((e) => e.type), events, result: result ?? null, newMessages };
}

const added = await run("please add 2 and 3", []);
const asked = await run("weather in Paris?", [weather]);
const finished = asked.events.at(-1);
const call = asked.newMessages.find((m) => m.role === "assistant" && m.toolCalls?.length)?.toolCalls[0];
agent.addMessage({ id: "t-1", role: "tool", toolCallId: call.id, content: "sunny, 21 C" });
const answered = await run(null, [weather]);

const text = (r) => r.events.filter((e) => e.type === "TEXT_MESSAGE_CONTENT").map((e) => e.delta).join("");
console.log(
  JSON.stringify({
    added: {
      types: added.types,
      started: added.events[0],
      toolCall: added.events.find((e) => e.type === "TOOL_CALL_START").toolCallName,
      result: added.events.find((e) => e.type === "TOOL_CALL_RESULT").content,
      text: text(added),
    },
    asked: { types: asked.types, outcome: finished.outcome ?? null, call },
    answered: { types: answered.types, text: text(answered) },
    messages: agent.messages.map((m) => m.role),
  }),
);
