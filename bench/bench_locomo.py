"""Retrieval quality of long-term memory on LoCoMo (``snap-research/locomo``): evidence recall of the recall step.

Run: ``python bench/bench_locomo.py PATH [--conversations N] [--questions-per-conversation N] [--state DIR]``
where ``PATH`` is the dataset: ``data/locomo10.json`` of the public repository, or ``data/locomo10.zip`` of its
first release (one JSON file per conversation). The data is CC BY-NC: it is read from where you put it and never
committed; without ``PATH`` (as in CI, which cannot reach it) the bench says so and exits 0. With ``--state DIR``
the Postgres data and which fact stands for which dialog turn are kept in ``DIR`` (created if missing): a
conversation stored there already is not stored again, so ranking changes are measured against the same stored
facts without the ingest (~13-15 minutes for all 10 on 2 shared cores).

What runs, all on this machine: an embedded Postgres 18 + pgvector, ``kora model-hosted`` serving the real
all-MiniLM-L6-v2 (one intra-op thread) and ``kora memory`` using it as its embedding model (no summary model, recall
threshold 0 so that nothing is cut before top-k). Each conversation is one user; every dialog turn is stored as a
fact with ``POST /v1/facts`` (text ``"[<session date>] <speaker>: <text>"``, so the date is searchable), remembering
which dialog id (``D3:1``) each fact id stands for (a turn answered ``duplicate`` maps to the fact it repeats).
Then each question is recalled at ``user`` scope, top 10:

* **hybrid**: ``POST /v1/recall`` over HTTP, end to end (the service embeds the question, then vector and full-text
  candidates are blended): its latency p50 / p95 is the one an agent sees; where it goes: **hybrid, SQL alone**
  (:func:`kora.memory_service.recall.recall_facts` in this process with the question's vector, the same ranking)
  and **query embedding alone** (``POST /v1/embeddings`` to ``kora model-hosted``, latency only);
* **full text only**: :func:`kora.memory_service.recall.recall_facts` in this process on the same database, with
  no query embedding (the service's path without an embedding model);
* **vector only**: the nearest facts by cosine (pgvector, exact), the question embedded by the same model; and
  **vector only, own and contextual**: by the mean of the cosines to a fact's own and contextual embeddings, the
  cosine the hybrid ranking uses;
* **rank fusion**: reciprocal rank fusion (k = 60) of the top 20 of those two lists, a candidate for the service.

For each, evidence recall per question category: ``any@k`` (at least one evidence turn in the top k) and
``all@k`` (every evidence turn in it), at k = 5 and 10. LoCoMo's categories: 1 multi-hop, 2 temporal,
3 open-domain, 4 single-hop, 5 adversarial.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
import zipfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg
from bench_memory_service import (  # this directory, first on sys.path
    ADMIN,
    kora,
    new_database,
    postgres,
    service_env,
)

from kora.memory_service import recall
from kora.memory_service.database import Database
from kora.memory_service.settings import load_memory_service_settings

APP = "locomo"
#: Where ``--state`` keeps which fact stands for which dialog turn, per conversation.
DIALOGS = "dialogs.json"
TOP_K = 10
MODEL = "all-MiniLM-L6-v2"


@dataclass
class Conversation:
    """One LoCoMo sample: its turns ``(dia_id, text)`` in order and its questions."""

    name: str
    turns: list[tuple[str, str]]
    questions: list[dict[str, object]]


def _conversation(name: str, sample: dict[str, object]) -> Conversation:
    """A sample of either release: ``{"conversation": {...}, "qa": [...]}`` or the sessions at its top level."""
    body = sample.get("conversation", sample)
    assert isinstance(body, dict)
    turns: list[tuple[str, str]] = []
    number = 1
    while f"session_{number}" in body:
        date = str(body.get(f"session_{number}_date_time", ""))
        for turn in body[f"session_{number}"]:
            text = turn.get("text", "")
            if turn.get("blip_caption"):
                text = f"{text} [shares a photo: {turn['blip_caption']}]"
            turns.append((str(turn["dia_id"]), f"[{date}] {turn['speaker']}: {text}"))
        number += 1
    questions = [q for q in sample.get("qa", []) if isinstance(q, dict) and q.get("evidence")]
    return Conversation(name, turns, questions)


def load(path: Path) -> list[Conversation]:
    """The conversations of ``locomo10.json`` or of the first release's ``locomo10.zip``."""
    if path.suffix == ".zip":
        with zipfile.ZipFile(path) as archive:
            names = sorted(n for n in archive.namelist() if n.endswith(".json"))
            return [_conversation(Path(n).stem, json.loads(archive.read(n))) for n in names]
    samples = json.loads(path.read_text())
    return [_conversation(str(s.get("sample_id", i)), s) for i, s in enumerate(samples)]


@dataclass
class Scores:
    """Hits per category: ``{category: {"any@5": [0/1, ...], ...}}`` and latencies in seconds."""

    hits: dict[str, dict[str, list[int]]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(list)))
    latencies: list[float] = field(default_factory=list)

    def add(self, category: str, found: list[set[str]], evidence: set[str]) -> None:
        for k in (5, 10):
            seen = set().union(*found[:k]) if found else set()
            for key in (category, "all"):
                self.hits[key][f"any@{k}"].append(int(bool(seen & evidence)))
                self.hits[key][f"all@{k}"].append(int(evidence <= seen))


async def ingest(client: httpx.AsyncClient, conversation: Conversation) -> tuple[dict[str, set[str]], int]:
    """Store every turn as a fact of the conversation's user; fact id -> dialog ids, and how many were duplicates."""
    dialog: dict[str, set[str]] = defaultdict(set)
    duplicates = 0
    for dia_id, text in conversation.turns:
        body = {"app_name": APP, "user_id": conversation.name, "content": text[:4000]}
        answer = (await client.post("/v1/facts", json=body, timeout=120)).raise_for_status().json()
        dialog[answer["fact_id"]].add(dia_id)
        duplicates += answer["status"] == "duplicate"
    return dialog, duplicates


async def run(path: Path, conversations: int, per_conversation: int, state: Path | None) -> None:
    data = load(path)[:conversations]
    with contextlib.ExitStack() as stack:
        if state is None:
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kora-locomo-")))
        else:
            directory = state
            directory.mkdir(parents=True, exist_ok=True)
        admin_uri = stack.enter_context(postgres(directory, keep=state is not None))
        database_url = kept_database(admin_uri, "locomo")
        with kora(["model-hosted"], {"MODEL_HOSTED_MODEL": MODEL}, "/ready") as (_, model_url):
            env = service_env(
                database_url,
                embedding_model_api_url=f"{model_url}/v1",
                embedding_model=MODEL,
                score_threshold="0",
                workers="1",
            )
            with kora(["memory"], env, "/ready") as (_, service_url):
                await measure(data, service_url, model_url, database_url, per_conversation, state)


def kept_database(admin_uri: str, name: str) -> str:
    """The URL of database ``name`` on ``admin_uri``'s server, created unless it exists."""
    with psycopg.connect(admin_uri, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            return admin_uri.replace("/postgres?", f"/{name}?", 1)
    return new_database(admin_uri, name)


def stored_dialogs(state: Path | None) -> dict[str, dict[str, set[str]]]:
    """Per conversation stored in ``state``, fact id -> dialog ids (empty without a state directory)."""
    if state is None or not (state / DIALOGS).exists():
        return {}
    kept = json.loads((state / DIALOGS).read_text())
    return {name: {fact: set(ids) for fact, ids in facts.items()} for name, facts in kept.items()}


def keep_dialogs(state: Path | None, dialogs: dict[str, dict[str, set[str]]]) -> None:
    if state is not None:
        kept = {name: {fact: sorted(ids) for fact, ids in facts.items()} for name, facts in dialogs.items()}
        (state / DIALOGS).write_text(json.dumps(kept))


async def measure(
    data: list[Conversation],
    service_url: str,
    model_url: str,
    database_url: str,
    per_conversation: int,
    state: Path | None,
) -> None:
    settings = load_memory_service_settings(service_env(database_url))
    database = Database(settings)
    await database.open()
    assert database.pool is not None
    names = (
        "hybrid",
        "hybrid, SQL alone",
        "query embedding alone",
        "full text only",
        "vector only",
        "vector only, own and contextual",
        "rank fusion",
    )
    modes = {name: Scores() for name in names}
    turns = duplicates = superseded = 0
    started = time.perf_counter()
    async with (
        httpx.AsyncClient(base_url=service_url, headers=ADMIN, timeout=60) as client,
        httpx.AsyncClient(timeout=60) as model,
    ):
        dialogs = stored_dialogs(state)
        for conversation in data:
            if conversation.name in dialogs:
                continue
            dialogs[conversation.name], dups = await ingest(client, conversation)
            keep_dialogs(state, dialogs)
            turns += len(conversation.turns)
            duplicates += dups
        ingest_seconds = time.perf_counter() - started
        # Wait for every fact's vectors: the contextual embeddings, and the own embeddings of facts stored while the
        # model was busy, come from the background embed jobs (for a kept store made before contextual embeddings:
        # every fact's, which is the cost of migrating a store).
        waited = time.perf_counter()
        waiting = first_waiting = 0
        for _ in range(3600):
            details = (await client.get("/ready")).json().get("details", {})
            waiting = int(details.get("facts_without_embedding", 0))
            first_waiting = first_waiting or waiting
            if not waiting:
                break
            await asyncio.sleep(1)
        if first_waiting:
            seconds = time.perf_counter() - waited
            print(
                f"embed jobs: {first_waiting} facts waiting for a vector, done in {seconds:.0f} s "
                f"({first_waiting / seconds:.1f}/s); left: {waiting}",
                flush=True,
            )
        async with database.pool.connection() as conn:
            row = await (await conn.execute("SELECT count(*) FROM facts WHERE invalidated_at IS NOT NULL")).fetchone()
            superseded = int(row[0]) if row else 0
        for conversation in data:
            dialog = dialogs[conversation.name]
            where = recall.scope_filter("user", APP, conversation.name, None, "user")
            for question in conversation.questions[: per_conversation or None]:
                text = str(question["question"])
                evidence = {str(e).strip() for e in question["evidence"]}  # type: ignore[union-attr]
                category = str(question.get("category", "?"))
                body = {"query": text, "scope": "user", "app_name": APP, "user_id": conversation.name, "top_k": TOP_K}
                begun = time.perf_counter()
                hits = (await client.post("/v1/recall", json=body)).raise_for_status().json()["hits"]
                modes["hybrid"].latencies.append(time.perf_counter() - begun)
                modes["hybrid"].add(category, [dialog.get(h["id"], set()) for h in hits], evidence)
                async with database.pool.connection() as conn:
                    begun = time.perf_counter()
                    lexical = await recall.recall_facts(conn, where, text, None, 2 * TOP_K, 0.0)
                    modes["full text only"].latencies.append(time.perf_counter() - begun)
                    modes["full text only"].add(category, [dialog.get(h.id, set()) for h in lexical[:TOP_K]], evidence)
                    begun = time.perf_counter()
                    vector = (
                        await model.post(f"{model_url}/v1/embeddings", json={"model": MODEL, "input": [text]})
                    ).json()["data"][0]["embedding"]
                    modes["query embedding alone"].latencies.append(time.perf_counter() - begun)
                    begun = time.perf_counter()
                    ranked = await recall.recall_facts(conn, where, text, vector, TOP_K, 0.0)
                    modes["hybrid, SQL alone"].latencies.append(time.perf_counter() - begun)
                    modes["hybrid, SQL alone"].add(category, [dialog.get(h.id, set()) for h in ranked], evidence)
                    condition, params = where.sql("f")
                    begun = time.perf_counter()
                    cur = await conn.execute(
                        f"SELECT f.fact_id FROM facts f WHERE f.invalidated_at IS NULL AND {condition} "
                        f"ORDER BY f.embedding <=> %(emb)s::vector LIMIT {2 * TOP_K}",
                        params | {"emb": vector},
                    )
                    nearest = [str(r[0]) for r in await cur.fetchall()]
                    modes["vector only"].latencies.append(time.perf_counter() - begun)
                    modes["vector only"].add(category, [dialog.get(f, set()) for f in nearest[:TOP_K]], evidence)
                    begun = time.perf_counter()
                    cur = await conn.execute(
                        f"SELECT f.fact_id FROM facts f WHERE f.invalidated_at IS NULL AND {condition} "
                        f"ORDER BY (f.embedding <=> %(emb)s::vector) "
                        f"+ coalesce(f.context_embedding <=> %(emb)s::vector, f.embedding <=> %(emb)s::vector) "
                        f"LIMIT {TOP_K}",
                        params | {"emb": vector},
                    )
                    mixed = [str(r[0]) for r in await cur.fetchall()]
                    modes["vector only, own and contextual"].latencies.append(time.perf_counter() - begun)
                    modes["vector only, own and contextual"].add(
                        category, [dialog.get(f, set()) for f in mixed], evidence
                    )
                    fused = fuse([h.id for h in lexical], nearest)
                    modes["rank fusion"].add(category, [dialog.get(f, set()) for f in fused[:TOP_K]], evidence)
    await database.close()
    report(modes, len(data), turns, duplicates, superseded, ingest_seconds)


#: The usual constant of reciprocal rank fusion (Cormack et al., 2009).
RRF_K = 60


def fuse(*rankings: list[str]) -> list[str]:
    """Reciprocal rank fusion of ranked id lists: each id scores the sum of ``1 / (RRF_K + rank)``, best first."""
    scores: dict[str, float] = defaultdict(float)
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            scores[item] += 1 / (RRF_K + rank)
    return sorted(scores, key=lambda item: scores[item], reverse=True)


def report(
    modes: dict[str, Scores], conversations: int, turns: int, duplicates: int, superseded: int, seconds: float
) -> None:
    print(
        f"LoCoMo: {conversations} conversations, {turns} turns stored in {seconds:.0f} s "
        f"({turns / seconds:.1f}/s; {duplicates} answered duplicate, {superseded} superseded), top {TOP_K}"
    )
    categories = [*sorted({c for scores in modes.values() for c in scores.hits if c != "all"}), "all"]
    for name, scores in modes.items():
        if scores.latencies and not scores.hits:
            p50 = 1000 * statistics.median(scores.latencies)
            p95 = 1000 * sorted(scores.latencies)[int(len(scores.latencies) * 0.95) - 1]
            print(f"\n{name}: p50 {p50:.1f} ms, p95 {p95:.1f} ms")
            continue
        if scores.latencies:
            p50 = 1000 * statistics.median(scores.latencies)
            p95 = 1000 * sorted(scores.latencies)[int(len(scores.latencies) * 0.95) - 1]
            print(f"\n{name}: recall p50 {p50:.1f} ms, p95 {p95:.1f} ms")
        else:
            print(f"\n{name} (computed from the two lists above):")
        print("| category | questions | any@5 | any@10 | all@5 | all@10 |")
        print("|---|---|---|---|---|---|")
        for category in categories:
            hits = scores.hits.get(category)
            if not hits:
                continue
            cells = [f"{statistics.mean(hits[key]):.3f}" for key in ("any@5", "any@10", "all@5", "all@10")]
            print(f"| {category} | {len(hits['any@5'])} | " + " | ".join(cells) + " |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", nargs="?", type=Path, help="locomo10.json or the first release's locomo10.zip")
    parser.add_argument("--conversations", type=int, default=10)
    parser.add_argument("--questions-per-conversation", type=int, default=0, help="0: all")
    parser.add_argument("--state", type=Path, help="keep the stored facts here and reuse them on the next run")
    args = parser.parse_args()
    if args.path is None or not args.path.exists():
        print(
            "bench_locomo: skipped, no dataset given (LoCoMo is CC BY-NC and not part of Kora: fetch "
            "snap-research/locomo and pass data/locomo10.json)",
            file=sys.stderr,
        )
        return 0
    asyncio.run(run(args.path, args.conversations, args.questions_per_conversation, args.state))
    return 0


if __name__ == "__main__":
    sys.exit(main())
