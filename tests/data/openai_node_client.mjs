// The official `openai` npm SDK against a Kora agent's /v1 (tests/integration/test_openai_node.py runs it):
// models, a client-tool round trip, a streamed answer and two Responses turns. Prints one JSON object.
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.argv[2], apiKey: "unused", maxRetries: 0 });
const tools = [{
  type: "function",
  function: {
    name: "get_weather",
    description: "The weather in a city.",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
}];

const models = await client.models.list();
const messages = [{ role: "user", content: "weather in Paris?" }];
const asked = await client.chat.completions.create({ model: "helper", messages, tools });
const message = asked.choices[0].message;
messages.push(message);
for (const call of message.tool_calls) {
  messages.push({ role: "tool", tool_call_id: call.id, content: `sunny in ${JSON.parse(call.function.arguments).city}` });
}
const answered = await client.chat.completions.create({ model: "helper", messages, tools });

let streamed = "";
const stream = await client.chat.completions.create({ model: "helper", stream: true, messages: [{ role: "user", content: "hello" }] });
for await (const chunk of stream) streamed += chunk.choices[0]?.delta?.content ?? "";

const first = await client.responses.create({ model: "helper", input: "hello there" });
const second = await client.responses.create({ model: "helper", input: "again", previous_response_id: first.id });

console.log(JSON.stringify({
  models: models.data.map((m) => m.id),
  finish: asked.choices[0].finish_reason,
  call: message.tool_calls[0].function,
  answer: answered.choices[0].message.content,
  streamed,
  responses: [first.output_text, second.output_text],
}));
