"""Nearest facts within a filter: exact search or the HNSW index, whichever is cheaper for that filter.

Every vector search of the service is filtered (a user's facts, a session's): Postgres's planner then picks the
HNSW index with pgvector's iterative scan, which walks the graph until enough rows pass the filter. That costs
about ``wanted / selectivity`` graph visits: at 100k facts (full-precision index), 10 neighbours among a user's
1% of them took ~54 ms, where reading that user's ~900 facts and sorting them exactly took ~3 ms; for a user with
10% of the facts the index won (~10 ms against ~21 ms). The planner cannot tell these apart, so :func:`use_index`
decides from the filter's row count and the table's size, and :func:`distance_order` writes the ``ORDER BY`` that
enforces it.

Cost model (measured with ``bench/bench_memory_service.py``, 384 dimensions): an exact check costs ~3 µs per
row of the filter (full precision); an HNSW visit ~45 µs (graph pages, many distances) over the half-precision
index the service builds (:func:`~kora.memory_service.schema.create_vector_index`), where it was ~70 µs over a
full-precision one: the bare k-NN of 5 among the ~900 facts of a user at 100k facts went from 35 to 23 ms (p50).
With ``n`` rows in the filter out of ``total``, the index visits ~``wanted * total / n`` nodes, so exact search
is cheaper while ``n**2 <= VISIT_COST * wanted * total``.
"""

from __future__ import annotations

from pgvector import Vector

from kora.memory_service.database import Conn
from kora.memory_service.schema import HNSW_MAX_DIMENSIONS, index_expression

#: How many exact distance checks one HNSW graph visit costs (the ratio of the two per-row costs above).
VISIT_COST = 16


def exact_is_cheaper(rows: int, total: int, wanted: int) -> bool:
    """True when sorting the filter's ``rows`` exactly costs less than finding ``wanted`` of them through the
    index over ``total`` rows (see the module docstring)."""
    return rows * rows <= VISIT_COST * wanted * max(total, rows)


async def scope_size(conn: Conn, condition: str, params: dict[str, object]) -> tuple[int, int]:
    """``(valid, total)``: the count of valid facts matching ``condition`` (on alias ``f``, with ``params``) and
    the planner's estimate of the table's size.

    One query. The count leaves out whether each fact has an embedding: so it is answered from the btree index
    alone (an index-only scan), where reading every row of a large filter would cost as much as the search it is
    meant to spare.
    """
    cur = await conn.execute(
        f"SELECT (SELECT count(*) FROM facts f WHERE f.invalidated_at IS NULL AND {condition}), "
        f"(SELECT reltuples::bigint FROM pg_class WHERE oid = 'facts'::regclass)",
        params,
    )
    row = await cur.fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


async def use_index(conn: Conn, condition: str, params: dict[str, object], wanted: int) -> bool:
    """Whether a search for the ``wanted`` nearest facts matching ``condition`` (on alias ``f``, with ``params``)
    should go through the HNSW index rather than sort the filter's facts exactly (:func:`scope_size`)."""
    rows, total = await scope_size(conn, condition, params)
    return not exact_is_cheaper(rows, total, wanted)


def distance_order(column: str, vector: str, dimension: int, indexed: bool) -> str:
    """The ``ORDER BY`` expression by cosine distance of ``column`` to ``vector`` (SQL: a ``vector`` parameter) of
    ``dimension``: when ``indexed``, between their half-precision forms, as the HNSW index holds them
    (:func:`~kora.memory_service.schema.index_expression`); else at full precision, which the index cannot serve
    (exact search). Above :data:`~kora.memory_service.schema.HNSW_MAX_DIMENSIONS` there is no index: always exact."""
    if indexed and dimension <= HNSW_MAX_DIMENSIONS:
        return f"{index_expression(column, dimension)} <=> {index_expression(vector, dimension)}"
    return f"{column} <=> {vector}"


def parameter(embedding: list[float]) -> Vector:
    """``embedding`` as a query parameter sent in pgvector's binary form (the service's connections register its
    types): ~0.05 ms for 384 dimensions, where a Python list goes out as a text ``float8[]`` literal (~2 ms of
    formatting per query, measured on a recall) to be cast to ``vector`` by the server."""
    return Vector(embedding)
