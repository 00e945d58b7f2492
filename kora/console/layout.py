"""Where the graph page draws each resource and each edge (an SVG drawn on the server, so the page needs no
graph library): columns from left to right, agents first (an agent right of every agent that delegates to it),
then tool servers and memory stores, then ModelAPIs; each edge a curve from the right side of the resource that
uses to the left side of the one used, and an edge that skips a column (an agent's ModelAPI) goes around,
through the gaps between columns and a lane under every node, so it never crosses one.

Units are SVG user units (the page scales the drawing to its width).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kora.console.sources import ConsoleResource
from kora.resources import Kind

#: A node's width and height, the gap between columns and between the nodes of a column, the margin.
NODE_WIDTH, NODE_HEIGHT, COLUMN_GAP, ROW_GAP, MARGIN = 190, 56, 90, 22, 12
#: Height of the lane under the nodes that edges skipping a column run along, and their corners' radius.
LANE, CORNER = 30, 10
#: Kinds in the column after the agents'; ModelAPIs come last, any other kind with the tool servers.
MIDDLE_KINDS = (Kind.MCP_SERVER.value, Kind.MEMORY_STORE.value)


@dataclass(frozen=True)
class Node:
    """A resource at ``(x, y)``, its top left corner."""

    resource: ConsoleResource
    x: int
    y: int


@dataclass(frozen=True)
class Edge:
    """``source`` uses ``target`` as ``relation``; ``path`` is the SVG path data of the curve between them."""

    source: Node
    target: Node
    relation: str
    path: str


@dataclass(frozen=True)
class Layout:
    """The drawing: its size and what it places."""

    width: int
    height: int
    nodes: list[Node]
    edges: list[Edge]


def _agent_levels(agents: Sequence[ConsoleResource]) -> dict[tuple[str, str], int]:
    """Each agent's column among the agents: one right of the deepest agent that delegates to it (a cycle of
    delegations stops growing at the number of agents)."""
    level = {(a.namespace, a.name): 0 for a in agents}
    for _ in range(len(agents)):
        changed = False
        for agent in agents:
            here = level[(agent.namespace, agent.name)]
            for peer in agent.peers:
                key = (agent.namespace, peer)
                if key in level and level[key] <= here and here + 1 < len(agents):
                    level[key] = here + 1
                    changed = True
        if not changed:
            break
    return level


def _column(resource: ConsoleResource, levels: dict[tuple[str, str], int], agent_columns: int) -> int:
    if resource.kind == Kind.AGENT.value:
        return levels[(resource.namespace, resource.name)]
    if resource.kind == Kind.MODEL_API.value:
        return agent_columns + 1
    return agent_columns


def layout(resources: Sequence[ConsoleResource]) -> Layout:
    """The drawing of ``resources`` and the links between them (links to resources not listed are left out)."""
    agents = [r for r in resources if r.kind == Kind.AGENT.value]
    levels = _agent_levels(agents)
    agent_columns = max(levels.values(), default=-1) + 1
    columns: dict[int, list[ConsoleResource]] = {}
    for resource in resources:
        columns.setdefault(_column(resource, levels, agent_columns), []).append(resource)
    used = sorted(columns)
    nodes: dict[tuple[str, str, str], Node] = {}
    for place, column in enumerate(used):
        for row, resource in enumerate(columns[column]):
            x = MARGIN + place * (NODE_WIDTH + COLUMN_GAP)
            y = MARGIN + row * (NODE_HEIGHT + ROW_GAP)
            nodes[(resource.kind, resource.namespace, resource.name)] = Node(resource, x, y)
    rows = max((len(column) for column in columns.values()), default=0)
    bottom = MARGIN + rows * NODE_HEIGHT + max(rows - 1, 0) * ROW_GAP
    edges: list[Edge] = []
    for source in nodes.values():
        for link in source.resource.links:
            target = nodes.get((link.kind, source.resource.namespace, link.name))
            if target is not None:
                edges.append(Edge(source, target, link.relation, _path(source, target, bottom + LANE // 2)))
    width = 2 * MARGIN + len(used) * NODE_WIDTH + max(len(used) - 1, 0) * COLUMN_GAP
    skips = any(abs(e.target.x - e.source.x) > NODE_WIDTH + COLUMN_GAP for e in edges)
    height = bottom + MARGIN + (LANE if skips else 0)
    return Layout(width, height, list(nodes.values()), edges)


def _path(source: Node, target: Node, lane: int) -> str:
    """The edge from ``source`` to ``target``: :func:`_curve` between neighbouring columns (or within one),
    :func:`_around` when it skips a column."""
    if abs(target.x - source.x) > NODE_WIDTH + COLUMN_GAP:
        return _around(source, target, lane)
    return _curve(source, target)


def _around(source: Node, target: Node, lane: int) -> str:
    """Out of the side of ``source`` facing ``target`` into the gap next to it, down to the lane at ``lane``,
    along it to the gap next to ``target``, up and into its side: right angles with rounded corners."""
    forward = target.x > source.x
    sign = 1 if forward else -1
    x1 = source.x + NODE_WIDTH if forward else source.x
    x2 = target.x if forward else target.x + NODE_WIDTH
    y1, y2 = source.y + NODE_HEIGHT // 2, target.y + NODE_HEIGHT // 2
    gap1, gap2 = x1 + sign * COLUMN_GAP // 3, x2 - sign * COLUMN_GAP // 3
    r = CORNER
    return (
        f"M{x1},{y1} L{gap1 - sign * r},{y1} Q{gap1},{y1} {gap1},{y1 + r} L{gap1},{lane - r} "
        f"Q{gap1},{lane} {gap1 + sign * r},{lane} L{gap2 - sign * r},{lane} Q{gap2},{lane} {gap2},{lane - r} "
        f"L{gap2},{y2 + r} Q{gap2},{y2} {gap2 + sign * r},{y2} L{x2},{y2}"
    )


def _curve(source: Node, target: Node) -> str:
    """A cubic curve from the right middle of ``source`` to the left middle of ``target`` (from the bottom of
    ``source`` to the top of ``target`` when both are in one column)."""
    if source.x == target.x:
        x1, y1 = source.x + NODE_WIDTH // 2, source.y + (NODE_HEIGHT if target.y > source.y else 0)
        x2, y2 = target.x + NODE_WIDTH // 2, target.y + (0 if target.y > source.y else NODE_HEIGHT)
        return f"M{x1},{y1} C{x1 + 40},{y1} {x2 + 40},{y2} {x2},{y2}"
    x1, y1 = source.x + NODE_WIDTH, source.y + NODE_HEIGHT // 2
    x2, y2 = target.x, target.y + NODE_HEIGHT // 2
    if x2 < x1:  # a link back to an earlier column
        x1, x2 = source.x, target.x + NODE_WIDTH
    bend = max(abs(x2 - x1) // 2, 30)
    direction = 1 if x2 >= x1 else -1
    return f"M{x1},{y1} C{x1 + direction * bend},{y1} {x2 - direction * bend},{y2} {x2},{y2}"
