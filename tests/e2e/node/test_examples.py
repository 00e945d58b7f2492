"""Every example of ``examples/`` applied with ``kubectl apply`` to a real node, reaching ``Ready`` from real pods.

The operator runs in a pod (installed by the Helm chart, with its RBAC and ServiceAccount, its admission webhook
served through its Service); each workload runs Kora's image under the pod security context the operator renders.
Chats go through each agent's Service (its cluster IP, load-balanced by kube-proxy), delegations from pod to pod
through Services and cluster DNS.
"""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from kora.core.protocol import SESSION_HEADER
from tests.support.kube import KubectlError, restricted_problems
from tests.support.node import (
    OPERATOR_NAMESPACE,
    RELEASE,
    REPO,
    KoraOnNode,
    host_path_volume,
    load_documents,
    wait_for,
)

pytestmark = [pytest.mark.e2e, pytest.mark.node, pytest.mark.slow]

EXAMPLES = REPO / "examples"


def agent_client(kora: KoraOnNode, name: str, namespace: str) -> openai.OpenAI:
    """An OpenAI client for Agent ``name`` through its Service."""
    return openai.OpenAI(
        base_url=kora.service_url(f"agent-{name}", namespace, "/v1"), api_key="unused", timeout=60, max_retries=2
    )


def ask(client: openai.OpenAI, text: str, session: str | None = None, user: str | None = None) -> tuple[str, str]:
    """One chat turn (as ``user``, named in the header the memory example's agent trusts); ``(answer, session
    id)``."""
    headers = {SESSION_HEADER: session} if session else {}
    if user is not None:
        headers["X-Forwarded-User"] = user
    raw = client.chat.completions.with_raw_response.create(
        model="agent", messages=[{"role": "user", "content": text}], extra_headers=headers
    )
    return str(raw.parse().choices[0].message.content), raw.headers[SESSION_HEADER]


def apply_example(kora: KoraOnNode, name: str) -> str:
    """``kubectl apply`` examples/<name> into a namespace of the same name and wait until every resource is Ready;
    the namespace."""
    namespace = kora.namespace(f"example-{name}")
    kora.apply(EXAMPLES / name, namespace)
    kora.wait_all_ready(load_documents(EXAMPLES / name), namespace)
    return namespace


def test_quickstart_chats_with_a_tool_call_through_the_agents_service(kora: KoraOnNode) -> None:
    namespace = apply_example(kora, "quickstart")
    client = agent_client(kora, "assistant", namespace)
    answer, session = ask(client, "What is 2 plus 3?")
    # The scripted model answers this only after the `add` tool ran in the MCPServer's pod and returned 5.
    assert answer == "2 plus 3 is 5."
    answer, _ = ask(client, "What is 40 plus 2?", session)
    assert answer == "40 plus 2 is 42."


def test_every_workload_runs_as_a_non_root_user_under_a_restricted_security_context(kora: KoraOnNode) -> None:
    namespace = apply_example(kora, "quickstart")
    pods = kora.pods(namespace, "app.kubernetes.io/managed-by=kora-operator")
    assert {pod["metadata"]["labels"]["kora.dev/kind"] for pod in pods} == {"Agent", "MCPServer", "ModelAPI"}
    for pod in pods:
        name = pod["metadata"]["name"]
        # What PodSecurity's `restricted` profile asks, as rendered (and a read-only root filesystem).
        assert restricted_problems(pod["spec"]) == [], name
        # And as run: the kernel's view from inside the container.
        uid = kora.exec(namespace, name, "id", "-u").strip()
        assert uid.isdigit(), uid
        assert int(uid) != 0, f"{name} runs as root"
        status = kora.exec(namespace, name, "cat", "/proc/1/status")
        assert "NoNewPrivs:\t1" in status, name
        assert "CapEff:\t0000000000000000" in status, name


def test_the_operator_runs_in_a_pod_with_its_service_account_and_its_webhook_refuses_an_invalid_agent(
    kora: KoraOnNode,
) -> None:
    (operator,) = [
        pod
        for pod in kora.pods("kora-system", "app.kubernetes.io/component=operator")
        if not pod["metadata"].get("deletionTimestamp")
    ]
    assert operator["status"]["phase"] == "Running"
    assert operator["spec"]["serviceAccountName"] == "kora"
    namespace = kora.namespace("webhook-check")
    # Proxy mode without its proxyConfig: a cross-field rule only the webhook checks, not the CRD schema.
    broken = "apiVersion: kora.dev/v1alpha1\nkind: ModelAPI\nmetadata: {name: broken}\nspec: {mode: Proxy}\n"
    with pytest.raises(KubectlError) as refused:
        kora.kubectl("apply", "-n", namespace, "-f", "-", stdin=broken)
    # The API server reached the webhook through the operator's Service, in the operator's pod.
    assert "denied the request" in refused.value.stderr
    assert "proxyConfig" in refused.value.stderr


def test_multi_agent_delegates_from_pod_to_pod_through_services_and_cluster_dns(kora: KoraOnNode) -> None:
    namespace = apply_example(kora, "multi-agent")
    client = agent_client(kora, "coordinator", namespace)
    answer, _ = ask(client, "What is 6 times 7?")
    assert answer == "The math specialist says: 6 times 7 is 42."
    answer, _ = ask(client, "What time is it?")
    assert answer.startswith("The clock specialist says: It is 20"), answer


def test_the_charts_console_shows_the_cluster_and_follows_a_delegation_into_the_peers_pod(kora: KoraOnNode) -> None:
    # The chart's console in its pod: Kora's resources from the API server under its own role, and sessions read
    # in the agents' pods through their Services with the operator tokens of the credentials Secrets.
    kora.namespace(OPERATOR_NAMESPACE)
    token_secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "kora-console-token", "namespace": OPERATOR_NAMESPACE},
        "stringData": {"token": "console-e2e-token"},
    }
    kora.kubectl("apply", "-f", "-", stdin=json.dumps(token_secret))
    auth = {"Authorization": "Bearer console-e2e-token"}
    kora.values["console.enabled"] = True
    kora.values["console.accessTokenSecret"] = "kora-console-token"
    try:
        kora.install()
        namespace = apply_example(kora, "multi-agent")
        console = kora.service_url(f"{RELEASE}-console", OPERATOR_NAMESPACE)
        assert httpx.get(f"{console}/api/state", timeout=60).status_code == 401
        state = httpx.get(f"{console}/api/state", headers=auth, timeout=60).json()
        assert state["error"] is None, state
        shown = {(r["namespace"], r["kind"], r["name"]): r for r in state["resources"]}
        coordinator = shown[(namespace, "Agent", "coordinator")]
        assert coordinator["phase"] == "Ready"
        assert [(link["relation"], link["name"]) for link in coordinator["links"]] == [
            ("model", "scripted"),
            ("delegates", "math"),
            ("delegates", "clock"),
        ]
        answer, session = ask(agent_client(kora, "coordinator", namespace), "What is 6 times 7?")
        assert answer == "The math specialist says: 6 times 7 is 42."

        def listed() -> bool:
            page = httpx.get(
                f"{console}/sessions", params={"agent": f"{namespace}/coordinator"}, headers=auth, timeout=60
            )
            return session in page.text

        wait_for(listed, "the coordinator's session listed by the console", within=60)
        followed = httpx.get(
            f"{console}/sessions/{namespace}/coordinator/{session}/delegated/math",
            headers=auth,
            timeout=60,
            follow_redirects=True,
        )
        assert followed.status_code == 200
        assert "task_delegation_received" in followed.text, followed.text
        assert "6 times 7 is 42." in followed.text
    finally:
        kora.values.pop("console.enabled", None)
        kora.values.pop("console.accessTokenSecret", None)
        kora.install()


def test_memory_recalls_in_a_new_session_what_was_told_in_another_from_a_store_on_a_volume(
    kora: KoraOnNode,
) -> None:
    # The MemoryStore's claim binds this volume: the test cluster has no dynamic provisioner.
    host_path_volume(kora, "example-memory")
    namespace = apply_example(kora, "memory")
    client = agent_client(kora, "assistant", namespace)
    _, told = ask(client, "Hello! I live in Lisbon.", user="alice")

    def recalled() -> str | None:
        answer, session = ask(client, "Where do I live?", user="alice")
        assert session != told
        return answer if "Lisbon" in answer else None

    # The store extracts the fact in the background, in its own pod, with the model's pod.
    answer = wait_for(recalled, "alice's fact recalled in a new session", within=180, every=2)
    assert answer.startswith("From my memory:")
    # Another user, and an anonymous request, recall nothing of alice's.
    assert "Lisbon" not in ask(client, "Where do I live?", user="bob")[0]
    assert "Lisbon" not in ask(client, "Where do I live?")[0]


def test_budgets_stops_a_looping_turn_in_its_pod_at_the_tool_call_budget_the_operator_wired(
    kora: KoraOnNode,
) -> None:
    namespace = apply_example(kora, "budgets")
    client = agent_client(kora, "sleepy", namespace)
    raw = client.chat.completions.with_raw_response.create(
        model="sleepy", messages=[{"role": "user", "content": "count sheep"}]
    )
    choice = raw.parse().choices[0]
    assert choice.finish_reason == "length"
    assert (choice.message.content or "").startswith("budget_exhausted: tool_calls"), choice.message.content


def test_approvals_pauses_a_deletion_in_its_pod_until_it_is_approved(kora: KoraOnNode) -> None:
    """The operator wires spec.config.toolApproval into the agent's pod: the deletion waits for its decision."""
    namespace = apply_example(kora, "approvals")
    client = agent_client(kora, "janitor", namespace)
    ask = [{"role": "user", "content": "delete notes.txt"}]
    raw = client.chat.completions.with_raw_response.create(model="janitor", messages=ask)
    session = raw.headers["x-session-id"]
    choice = raw.parse().choices[0]
    assert choice.finish_reason == "tool_calls", choice.message.content
    [call] = choice.message.tool_calls or []
    assert call.model_dump()["kora_approval"]["target"] == "files/delete_file"
    decision = {"role": "tool", "tool_call_id": call.id, "content": '{"decision": "approve"}'}
    done = client.chat.completions.create(
        model="janitor",
        messages=[*ask, choice.message.model_dump(exclude_none=True), decision],
        extra_headers={"X-Session-ID": session},
    )
    assert done.choices[0].message.content == "About notes.txt: deleted notes.txt"


def example_names() -> list[str]:
    return sorted(path.name for path in EXAMPLES.iterdir() if path.is_dir())


def test_every_example_is_covered_here() -> None:
    # A new example must get its own test on the real node.
    covered = {"quickstart", "multi-agent", "memory", "budgets", "approvals"}
    assert set(example_names()) == covered, f"examples without a real-node test: {set(example_names()) - covered}"
