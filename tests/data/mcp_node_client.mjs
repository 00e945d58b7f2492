// The official MCP TypeScript SDK as a client of `kora mcp`: what it negotiated, the tools it lists, a tool call
// (structured and as text), a tool that raises, and an unknown tool. Prints one JSON object on stdout.
// Usage: node mcp_node_client.mjs <MCP endpoint URL>
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const transport = new StreamableHTTPClientTransport(new URL(process.argv[2]));
const client = new Client({ name: "kora-node-test", version: "1.0.0" });
await client.connect(transport);

const seen = {
  protocolVersion: transport.protocolVersion,
  server: client.getServerVersion(),
  capabilities: Object.keys(client.getServerCapabilities() ?? {}).sort(),
};
const { tools } = await client.listTools();
seen.tools = Object.fromEntries(tools.map((tool) => [tool.name, { description: tool.description, input: tool.inputSchema }]));
const added = await client.callTool({ name: "add", arguments: { a: 2, b: 3 } });
seen.add = { structured: added.structuredContent, text: added.content.map((block) => block.text).join(""), isError: added.isError ?? false };
const failed = await client.callTool({ name: "fail", arguments: {} });
seen.fail = { isError: failed.isError ?? false, text: failed.content.map((block) => block.text).join("") };
try {
  await client.callTool({ name: "nope", arguments: {} });
  seen.unknown = { thrown: false };
} catch (error) {
  seen.unknown = { thrown: true, code: error.code, message: String(error.message) };
}
await client.close();
process.stdout.write(JSON.stringify(seen));
