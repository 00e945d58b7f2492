"""The ``kora`` command line: one entry point, one sub-command per component.

``kora <command> [args...]`` imports only the module that implements ``<command>`` and hands it the
remaining arguments, so ``kora agent`` does not pay for the operator's or the local runtime's imports
(start-up time matters: an agent must answer ``/health`` within a second of starting). Each component
parses its own arguments with Typer in its package's ``cli`` module (``kora.<package>.cli``), through
:func:`kora.core.command.run_command` (bad arguments: a usage message and exit code 2).

Exit codes: 0 on success, 2 for an unknown command, 130 for a Ctrl-C the sub-command did not handle itself (one
that comes while its modules are still being imported: one line, no traceback), otherwise whatever the
sub-command returns.
"""

from __future__ import annotations

import difflib
import importlib
import sys
from collections.abc import Callable, Sequence

from kora.core.command import EXIT_INTERRUPTED

# command -> ("module", "function", one-line help). The function takes the argument list and returns an exit code.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "agent": ("kora.agent.cli", "cli", "Run the agent server (configured from the environment)."),
    "model": ("kora.scripted.cli", "cli", "Run the scripted OpenAI-compatible model server (tests, offline demo)."),
    "mcp": ("kora.mcp.cli", "cli", "Run the python-runtime MCP tool server."),
    "memory": ("kora.memory_service.cli", "cli", "Run the memory service (the MemoryStore workload)."),
    "model-proxy": ("kora.proxy.cli", "cli", "Run a ModelAPI in Proxy mode (forwards /v1 to a backend)."),
    "model-hosted": ("kora.hosted.cli", "cli", "Run a ModelAPI in Hosted mode (all-MiniLM-L6-v2 embeddings)."),
    "operator": ("kora.operator.cli", "cli", "Reconcile Kora's resources on a Kubernetes cluster (kopf)."),
    "up": ("kora.local.cli", "up_cli", "Run manifests as local processes behind a local gateway."),
    "status": ("kora.local.cli", "status_cli", "Show the workloads of the running kora up."),
    "logs": ("kora.local.cli", "logs_cli", "Print (-f: follow) a workload's log."),
    "down": ("kora.local.cli", "down_cli", "Stop the running kora up and every workload."),
    "chat": ("kora.local.cli", "chat_cli", "Chat with an agent through the local gateway (streaming)."),
    "console": ("kora.console.cli", "cli", "Serve the web console of a kora up run (kora up starts it)."),
    "token": ("kora.local.cli", "token_cli", "Print the operator token of an Agent or MemoryStore of kora up."),
}


def _usage() -> str:
    width = max(len(name) for name in COMMANDS)
    lines = ["usage: kora <command> [options]", "", "commands:"]
    lines += [f"  {name.ljust(width)}  {help_text}" for name, (_, _, help_text) in COMMANDS.items()]
    lines += ["", "Run 'kora <command> --help' for a command's options."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch ``kora <command> ...`` to the component that implements it; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in {"-h", "--help", "help"}:
        print(_usage())
        return 0
    if args[0] in {"--version", "version"}:
        from kora import __version__

        print(f"kora {__version__}")
        return 0
    entry = COMMANDS.get(args[0])
    if entry is None:
        close = difflib.get_close_matches(args[0], COMMANDS, n=1, cutoff=0.6)
        hint = f"; did you mean 'kora {close[0]}'?" if close else ""
        print(f"kora: unknown command {args[0]!r}{hint}\n\n{_usage()}", file=sys.stderr)
        return 2
    module_name, function_name, _ = entry
    try:
        command: Callable[[list[str]], int] = getattr(importlib.import_module(module_name), function_name)
        return command(args[1:])
    except KeyboardInterrupt:
        # Before a command installs its own handling (during its imports), Ctrl-C is Python's default
        # KeyboardInterrupt: a stop asked for, not a failure to show with a traceback.
        print(f"\nkora {args[0]}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":  # pragma: no cover - exercised through the console script
    raise SystemExit(main())
