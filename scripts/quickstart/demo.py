"""Holds a short conversation with the quickstart agent through the gateway and shows what it stored.

Exits 1 with the agent's error (e.g. its 502 when the model API's backend cannot be reached), never a
traceback.
"""

import os
import sys

import httpx
import openai

base = os.environ["KORA_AGENT_URL"]
client = openai.OpenAI(base_url=f"{base}/v1", api_key="none")
session = None
for question in ("What is 2 plus 3?", "Thanks! What time is it?"):
    print(f"\nyou   > {question}\nagent > ", end="", flush=True)
    headers = {"X-Session-ID": session} if session else {}
    try:
        with client.chat.completions.with_streaming_response.create(
            model="assistant", messages=[{"role": "user", "content": question}], stream=True, extra_headers=headers
        ) as response:
            session = response.headers["x-session-id"]
            for chunk in response.parse():
                for choice in chunk.choices:
                    print(choice.delta.content or "", end="", flush=True)
    except openai.APIError as error:
        status = getattr(error, "status_code", None) or 502  # an error inside the stream carries no status
        print(f"\nquickstart: the agent answered HTTP {status}: {error.message}", file=sys.stderr)
        sys.exit(1)
    print()
events = httpx.get(f"{base}/memory/events", params={"session_id": session}).json()["events"]
print(f"\nsession {session} holds {len(events)} events:")
for event in events:
    print(f"  {event['event_type']:<16} {str(event['content'])[:70]}")
