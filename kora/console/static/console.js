// Kora console: the graph follows kora up's state, and the chat streams a run over AG-UI (POST /ag-ui on the
// agent's gateway route, same origin). No library, no build step: this file is served as it is.
"use strict";

function el(tag, attrs, text) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

// -- Graph: every 2 s, the page as the server draws it now (drawing and table) replaces the last one ---------
function liveGraph(live) {
  async function refresh() {
    try {
      const answer = await fetch(live.dataset.live, { cache: "no-store" });
      if (!answer.ok) return;
      const fresh = new DOMParser().parseFromString(await answer.text(), "text/html").querySelector("#live");
      if (fresh && fresh.innerHTML !== live.innerHTML) live.innerHTML = fresh.innerHTML;
    } catch (error) {
      // The console itself is going away (kora down): keep the last drawing.
    }
  }
  setInterval(refresh, 2000);
}

// -- Chat over AG-UI -----------------------------------------------------------------------------------------
function newId(prefix) {
  return `${prefix}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 10)}`;
}

function chat(section) {
  const transcript = section.querySelector("#transcript");
  const status = section.querySelector("#chat-status");
  const form = section.querySelector("#send-form");
  const input = section.querySelector("#message");
  const button = form.querySelector("button");
  const key = `kora-thread:${section.dataset.agent}`;
  let thread = sessionStorage.getItem(key);
  if (!thread) {
    thread = newId("console");
    sessionStorage.setItem(key, thread);
  }
  section.querySelector("#thread").textContent = thread;
  const texts = new Map();
  const calls = new Map();
  // {delegation tool name: peer agent}: such a call is a delegation, followed into the peer's session.
  const delegations = JSON.parse(section.dataset.delegations || "{}");

  function add(kind, label, text) {
    const item = el("li", { class: `turn ${kind}` });
    item.append(el("span", { class: "who" }, label));
    const body = el("div", { class: "body" }, text);
    item.append(body);
    transcript.append(item);
    item.scrollIntoView({ block: "end" });
    return body;
  }

  function handle(event) {
    switch (event.type) {
      case "TEXT_MESSAGE_START":
        texts.set(event.messageId, add("assistant", "Agent", ""));
        break;
      case "TEXT_MESSAGE_CONTENT":
        texts.get(event.messageId).textContent += event.delta;
        break;
      case "TOOL_CALL_START": {
        const peer = delegations[event.toolCallName];
        const body = peer ? add("tool delegation", "Delegation", `to ${peer} `) : add("tool", "Tool call", "");
        if (!peer) body.append(el("strong", {}, event.toolCallName), " ");
        const args = el("code", { class: "args" }, "");
        body.append(args);
        calls.set(event.toolCallId, { body, args, peer });
        break;
      }
      case "TOOL_CALL_ARGS":
        calls.get(event.toolCallId).args.textContent += event.delta;
        break;
      case "TOOL_CALL_RESULT": {
        const call = calls.get(event.toolCallId);
        const result = typeof event.content === "string" ? event.content : JSON.stringify(event.content);
        call.body.append(el("div", { class: "result" }, `Result: ${result}`));
        if (call.peer) {
          const href = `${section.dataset.sessions}${encodeURIComponent(thread)}/delegated/${encodeURIComponent(call.peer)}`;
          const follow = el("a", { href }, `Follow into ${call.peer}'s session`);
          const line = el("div", { class: "follow" });
          line.append(follow);
          call.body.append(line);
        }
        break;
      }
      case "CUSTOM":
        // What memory recalled for the turn before the model was asked (Kora's kora.memory_recall event).
        if (event.name === "kora.memory_recall") {
          const { facts = [], summary = false } = event.value || {};
          const body = add("recall", "Memory recall", "");
          if (facts.length) {
            body.append(el("div", {}, "Facts added to the instructions:"));
            const list = el("ul", { class: "facts-recalled" });
            for (const fact of facts) list.append(el("li", {}, fact));
            body.append(list);
          }
          if (summary) body.append(el("div", {}, "A summary of this conversation's earlier turns."));
        }
        break;
      case "RUN_ERROR":
        add("error", "Error", `${event.message}${event.code ? ` (${event.code})` : ""}`);
        break;
      case "RUN_FINISHED": {
        // A run paused at calls waiting for a person's approval (decided with POST /approvals/{id}).
        const approvals = (event.result && event.result.approvals) || [];
        const pending = event.outcome && event.outcome.pendingToolCallIds;
        if (approvals.length) {
          const body = add("approval", "Waiting for approval", "");
          for (const approval of approvals) {
            const line = el("div", { class: "approval" });
            line.append(el("strong", {}, approval.tool), " ", el("code", {}, approval.id));
            body.append(line);
          }
          const decide = el("div", { class: "follow" });
          decide.append(el("a", { href: "/approvals" }, "Approve or reject on the Approvals page"));
          body.append(decide);
          status.textContent = "Waiting for approval.";
        } else {
          status.textContent = pending && pending.length ? "Waiting for a frontend tool." : "Done.";
        }
        break;
      }
    }
  }

  // The trace id of the turn just run (the session's last one), linked to the trace viewer when one is set.
  async function showTrace() {
    try {
      const answer = await fetch(`/api${section.dataset.sessions}${encodeURIComponent(thread)}/trace`, {
        cache: "no-store",
      });
      if (!answer.ok) return;
      const { trace_id: traceId, url } = await answer.json();
      if (!traceId) return;
      const line = el("li", { class: "turn-trace" }, "Trace of this turn: ");
      const code = el("code", { class: "trace-id" }, traceId);
      if (url) {
        const link = el("a", { href: url, target: "_blank", rel: "noopener" });
        link.append(code);
        line.append(link);
      } else {
        line.append(code);
      }
      transcript.append(line);
    } catch (error) {
      // No trace id to show: the console is going away.
    }
  }

  async function run(text) {
    const body = {
      threadId: thread,
      runId: newId("run"),
      messages: [{ id: newId("msg"), role: "user", content: text }],
    };
    const answer = await fetch(section.dataset.endpoint, {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
      body: JSON.stringify(body),
    });
    if (!answer.ok) {
      let message = `${answer.status} ${answer.statusText}`;
      try {
        const error = await answer.json();
        message = (error.error && error.error.message) || error.detail || message;
      } catch (ignored) {}
      add("error", "Error", `The agent refused the message: ${message}`);
      return;
    }
    // Server-sent events: "data: <json>" lines, events separated by a blank line.
    const reader = answer.body.getReader();
    const decoder = new TextDecoder();
    let buffered = "";
    let finished = false;
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffered += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffered.indexOf("\n\n")) >= 0) {
        const block = buffered.slice(0, end);
        buffered = buffered.slice(end + 2);
        for (const line of block.split("\n")) {
          if (!line.startsWith("data: ")) continue;
          const event = JSON.parse(line.slice(6));
          finished = finished || event.type === "RUN_FINISHED";
          handle(event);
        }
      }
    }
    // Only a run that finished stored a turn of its own: a refused or failed one has no trace to show.
    return finished;
  }

  form.addEventListener("submit", async (submitted) => {
    submitted.preventDefault();
    const text = input.value.trim();
    if (!text) return;
    add("user", "You", text);
    input.value = "";
    button.disabled = true;
    status.textContent = "The agent is answering…";
    try {
      if (await run(text)) await showTrace();
    } catch (error) {
      add("error", "Error", `The agent could not be reached: ${error}. Is kora up still running?`);
      status.textContent = "";
    } finally {
      button.disabled = false;
      input.focus();
    }
  });
}

document.addEventListener("DOMContentLoaded", () => {
  const live = document.querySelector("#live[data-live]");
  if (live) liveGraph(live);
  const section = document.querySelector("#chat");
  if (section) chat(section);
});
