"""What ``MODEL_HOSTED_THREADS`` does to the hosted embedder (all-MiniLM-L6-v2, ``kora model-hosted``).

Run: ``python bench/bench_hosted_threads.py [--queries 300] [--threads 1,2]`` (needs the ``embeddings`` extra;
about a minute). For each thread count, in a fresh subprocess (the runtime's thread setting is per process), the
model is loaded on one worker thread as ``kora model-hosted`` does, then that thread encodes:

* ``--queries`` single short queries, one after the other (a recall's query embedding): p50 / p95 / max in ms;
* batches of 64 facts (ingest, the memory service's ``embed`` jobs): facts per second.

``--busy N`` adds N processes spinning on the CPU during the measurement, standing in for the other workloads of a
shared node. Prints one line per thread count.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

QUERIES = [
    "where does the user live",
    "what is the name of the user's dog",
    "when is the dentist appointment",
    "which sports does Caroline play",
    "what did Melanie paint last summer",
]
FACT = "The user's sister Emma moved to Lyon in May {n} and works as a nurse at the city hospital."


def measure(threads: int, queries: int) -> dict[str, float]:
    """Load MiniLM with ``threads`` on a worker thread and time queries and batches there."""
    from kora.hosted.embedder import MiniLMEmbedder

    worker = ThreadPoolExecutor(max_workers=1)
    embedder = worker.submit(MiniLMEmbedder.load, threads).result()
    for text in QUERIES:  # warm-up
        worker.submit(embedder.embed, [text]).result()
    times = []
    for n in range(queries):
        started = time.perf_counter()
        worker.submit(embedder.embed, [QUERIES[n % len(QUERIES)] + f" {n}"]).result()
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    batch = [FACT.format(n=n) for n in range(64)]
    started = time.perf_counter()
    rounds = 5
    for _ in range(rounds):
        worker.submit(embedder.embed, batch).result()
    rate = rounds * len(batch) / (time.perf_counter() - started)
    return {
        "threads": threads,
        "query_p50_ms": round(statistics.median(times), 1),
        "query_p95_ms": round(times[int(len(times) * 0.95) - 1], 1),
        "query_max_ms": round(times[-1], 1),
        "ingest_facts_per_s": round(rate, 1),
    }


def main() -> None:
    """Run each thread count in its own subprocess and print its line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--threads", default=f"1,{os.cpu_count() or 1}", help="comma list; the default is torch's")
    parser.add_argument("--busy", type=int, default=0, help="CPU-spinning processes during the measurement")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(measure(args.child, args.queries)))
        return
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        for threads in [int(t) for t in args.threads.split(",")]:
            out = subprocess.run(
                [sys.executable, __file__, "--child", str(threads), "--queries", str(args.queries)],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            result = json.loads(out.strip().splitlines()[-1])
            result["busy_processes"] = args.busy
            print(json.dumps(result))
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


if __name__ == "__main__":
    main()
