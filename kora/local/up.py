"""``kora up FILE|DIR``: run a deployment's manifests as local processes behind a local gateway.

    kora up examples/quickstart [--port 8080] [--state-dir .kora] [--grace 5] [--watch]
                                [--pass-env NAME] [--secret-env [NAMESPACE/]NAME/KEY=VARIABLE]
                                [--no-console] [--trace-url URL]

Steps: load and validate the manifests (:func:`kora.resources.load_path`; on errors print the loader's
message and exit 2), give each workload a free loopback port, plan with :class:`Loopback` (workloads reach
each other directly) and public URLs through the gateway (agent cards and ``AGENT_PUBLIC_URL`` point at
``http://127.0.0.1:<port>/<ns>/agent/<name>``), serve the gateway (:mod:`kora.local.gateway`) and
supervise the workloads (:mod:`kora.local.supervisor`) until SIGINT/SIGTERM/SIGHUP (``kora down`` sends SIGTERM).
At start, workloads a killed ``kora up`` left in the same state dir are stopped first
(:mod:`kora.local.orphans`). ``secretKeyRef`` values come from ``--secret-env`` or the manifests' Secret
documents (:mod:`kora.local.secrets`); one in neither stops ``kora up`` before anything starts.

With ``--watch``, an edit of the manifests is applied while running (:mod:`kora.local.watch`): the files are
loaded and checked again, and only the workloads whose plan changed restart (new ones start, removed ones
stop, the others keep their process and port); the state file follows. A manifest that does not load is
reported with the same message as at start, and what runs keeps running until the files load again.

State dir layout: ``state.json`` (:mod:`kora.local.state`), ``logs/<namespace>-<kind>-<name>.log``,
``work/<namespace>-<kind>-<name>/`` (each workload's working directory), ``memory/<namespace>/<name>/``
(a local-storage MemoryStore's data, ``MEMORY_SERVICE_DATA_DIR``; kept across runs). Exit codes: 0 after a clean stop,
2 for bad options, invalid manifests, an unresolvable Secret, a taken gateway port or another ``kora up``
using the same state dir, 130 for a Ctrl-C (or SIGTERM) before any workload started.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from pathlib import Path
from typing import Annotated

import typer
import uvicorn

from kora.core import env as names
from kora.core.command import EXIT_INTERRUPTED
from kora.core.net import bind_socket, free_port
from kora.core.settings_errors import SettingsError
from kora.core.telemetry import Telemetry, instrument_app, setup_telemetry
from kora.core.trace_links import check_trace_url
from kora.local.backends import BackendWatch, proxy_backends
from kora.local.credentials import Credentials
from kora.local.gateway import create_gateway_app, gateway_body_limit, routes_from_plans
from kora.local.orphans import stop_leftovers
from kora.local.secrets import SECRET_ENV_FORMAT, SecretSource, parse_secret_env
from kora.local.state import (
    DEFAULT_STATE_DIR,
    FAILED,
    PENDING,
    READY,
    Link,
    UpState,
    WorkloadState,
    process_alive,
    read_state,
    render_table,
    write_state,
)
from kora.local.supervisor import Supervisor
from kora.local.watch import ManifestWatch, diff_plans
from kora.resources import (
    EnvEntry,
    GatewayRouted,
    Loopback,
    ManifestError,
    ModelAPI,
    ModelAPIMode,
    Probes,
    ResourceGraph,
    ResourceRef,
    SecretKeyRef,
    WorkloadPlan,
    links_of,
    load_path,
    plan_workloads,
    resolve_hosted_model,
    route_path,
)

__all__ = ["MEMORY_DIR", "describe", "plan_local", "up"]

#: Sub-directory of the state dir holding local-storage MemoryStores' data (``<namespace>/<name>/`` each).
MEMORY_DIR = "memory"


def plan_local(
    graph: ResourceGraph, gateway_url: str, state_dir: Path, keep_ports: Mapping[ResourceRef, int] | None = None
) -> dict[ResourceRef, WorkloadPlan]:
    """Plans of every workload on fresh loopback ports, public URLs through the gateway at ``gateway_url``.

    ``keep_ports``: workloads that keep the port they have (a ``--watch`` reload), so their URLs, and the
    environments of the workloads that call them, do not change. Local-storage MemoryStores keep their data
    in ``state_dir/memory/<namespace>/<name>``, outside the per-run working directories, so it survives
    ``kora down`` and the next ``kora up`` with this state dir. Every workload runs on this machine, so an agent
    that shares its A2A tasks (``taskStoreType: postgres``) without a ``TASK_STORE_URL`` of its own keeps them
    in its local-storage MemoryStore's embedded Postgres, over its unix socket; raises
    :class:`~kora.resources.loader.ManifestError` when that socket's path is too long for one.
    """
    kept = keep_ports or {}
    ports: dict[tuple[str, str, str], int] = {}
    for resource in graph:
        ref = ResourceRef(resource.kind, resource.metadata.namespace, resource.metadata.name)
        ports[ref] = kept[ref] if ref in kept else free_port()
    direct = Loopback(ports)
    return plan_workloads(
        graph,
        direct,
        public=GatewayRouted(gateway_url, direct=direct),
        data_root=state_dir / MEMORY_DIR,
        embedded_postgres=True,
    )


#: The web console's place among the workloads (no resource of the manifests has this kind).
CONSOLE_REF = ResourceRef("Console", "kora", "console")


def console_plan(state_dir: Path, gateway_url: str, trace_url: str | None = None) -> WorkloadPlan:
    """``kora console`` on a free loopback port, showing the run of ``state_dir`` (its state and the operator
    tokens kora up generated, which it reads from there), served at ``gateway_url``'s root; ``trace_url`` is its
    ``CONSOLE_TRACE_URL`` (a trace viewer's URL template, checked by the caller)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = (
        EnvEntry(names.CONSOLE_HOST, "127.0.0.1"),
        EnvEntry(names.CONSOLE_PORT, str(port)),
        EnvEntry(names.CONSOLE_STATE_DIR, str(state_dir)),
        *((EnvEntry(names.CONSOLE_TRACE_URL, trace_url),) if trace_url else ()),
    )
    return WorkloadPlan(
        ref=CONSOLE_REF,
        service_name="console",
        args=("console",),
        env=env,
        host="127.0.0.1",
        port=port,
        url=url,
        direct_url=url,
        public_url=gateway_url,
        probes=Probes(),
        depends_on=(),
        route_timeout_seconds=60.0,
    )


def describe(graph: ResourceGraph, ref: ResourceRef) -> str:
    """The NOTE column: what kind of model a ModelAPI is (``scripted (offline)``, ``proxy -> <base>``,
    ``hosted: all-MiniLM-L6-v2 (embeddings)``, ``hosted: not supported``), empty otherwise."""
    resource = graph.get(ref)
    if not isinstance(resource, ModelAPI):
        return ""
    spec = resource.spec
    if spec.mode is ModelAPIMode.PROXY and spec.proxy_config is not None:
        return f"proxy -> {spec.proxy_config.api_base}"
    if spec.mode is ModelAPIMode.HOSTED and spec.hosted_config is not None:
        hosted = resolve_hosted_model(spec.hosted_config.model, spec.hosted_config.model_path)
        return "hosted: not supported" if isinstance(hosted, str) else f"hosted: {hosted.short_name} (embeddings)"
    return "scripted (offline)"


def links(graph: ResourceGraph, ref: ResourceRef) -> list[Link]:
    """The resources the workload of ``ref`` uses (:func:`kora.resources.graph.links_of`), for the state file."""
    resource = graph.get(ref)
    if resource is None:
        return []
    return [Link(relation, target.kind, target.name) for relation, target in links_of(resource)]


def _slug(ref: ResourceRef) -> str:
    return f"{ref.namespace}-{ref.kind.lower()}-{ref.name}"


class _Gateway(uvicorn.Server):
    """uvicorn without its own signal handling: ``kora up`` owns SIGINT/SIGTERM and stops the gateway last."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


class _LocalRun:
    """One ``kora up`` from checked plans to a clean stop.

    Resolves each workload's environment, keeps the state file (``state_dir/state.json``) current, prints
    each workload's phase changes once and the table when every workload is first Ready, serves the gateway
    on ``gateway_sock`` and supervises the workloads until SIGINT/SIGTERM.
    """

    def __init__(
        self,
        graph: ResourceGraph,
        plans: dict[ResourceRef, WorkloadPlan],
        gateway_sock: socket.socket,
        state_dir: Path,
        telemetry: Telemetry,
        pass_env: tuple[str, ...] = (),
        otel_endpoint: str | None = None,
        watch: ManifestWatch | None = None,
        secrets: SecretSource | None = None,
        console: bool = True,
        trace_url: str | None = None,
    ) -> None:
        self._console = console_plan(state_dir, self._gateway_url_of(gateway_sock), trace_url) if console else None
        self._graph = graph
        self._secrets = secrets or SecretSource()
        self._watch = watch
        self._pass_env = pass_env
        self._telemetry = telemetry
        self._otel_endpoint = otel_endpoint
        self._plans = plans
        self._gateway_sock = gateway_sock
        self._state_dir = state_dir
        self._credentials = Credentials(state_dir)
        self._gateway_url = f"http://127.0.0.1:{gateway_sock.getsockname()[1]}"
        self._state = UpState(pid=os.getpid(), gateway_url=self._gateway_url, started_at=time.time())
        self._started = time.monotonic()
        self._shown_phases: dict[str, str] = {}  # "Kind/name" -> the phase last printed
        self._all_ready_shown = False
        self._environments_now: dict[ResourceRef, dict[str, str]] = {}
        self._routes = routes_from_plans(plans.values())
        self._backend_task: asyncio.Task[None] | None = None

    @staticmethod
    def _gateway_url_of(gateway_sock: socket.socket) -> str:
        return f"http://127.0.0.1:{gateway_sock.getsockname()[1]}"

    async def run(self, grace: float, early_stops: Sequence[int] = ()) -> int:
        """Serve until stopped; returns 0, 2 after saying which Secret reference cannot be resolved, or 130
        (:data:`~kora.core.command.EXIT_INTERRUPTED`) when a stop signal came before anything started.

        ``grace``: seconds between a workload's SIGTERM and its SIGKILL. ``early_stops``: the stop signals
        received so far (read once this run's own handlers are installed)."""
        try:
            environments = self._environments(self._graph, self._plans)
        except LookupError as error:
            print(f"kora up: {error}", file=sys.stderr)
            return 2
        self._environments_now = environments
        self._record_workloads(self._plans)
        supervisor = Supervisor(
            self._plans,
            environments,
            self._state,
            self._work_dirs(self._plans),
            on_change=self._on_change,
            grace_seconds=grace,
            pass_env=self._pass_env,
        )
        console = self._console_supervisor(grace)
        loop = asyncio.get_running_loop()

        def stop() -> None:
            supervisor.stop()
            if console is not None:
                console.stop()

        for stop_signal in _stop_signals():
            loop.add_signal_handler(stop_signal, stop)
        if early_stops:
            print("kora up: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
        console_task = asyncio.create_task(console.run()) if console is not None else None
        # Routes are updated in place by a reload; the body limit is the one of the workloads at start.
        app = create_gateway_app(
            self._routes,
            max_body_bytes=gateway_body_limit(self._plans.values()),
            not_ready=self._not_ready,
            fallback=self._console.direct_url.rstrip("/") if self._console is not None else None,
        )
        instrument_app(app, self._telemetry)
        gateway = _Gateway(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on"))
        gateway_task = asyncio.create_task(gateway.serve(sockets=[self._gateway_sock]))
        print(f"kora up: gateway on {self._gateway_url}; state and logs in {self._state_dir}", flush=True)
        write_state(self._state_dir, self._state)
        self._on_change()
        self._watch_backends()
        stop_watching = asyncio.Event()
        if self._watch is not None:
            print(f"kora up: watching {self._watch.path} for changes", flush=True)
            reload = asyncio.create_task(self._watch.run(lambda: self._reload(supervisor), stop_watching))
        await supervisor.run()
        await asyncio.to_thread(self._stop_unheld_databases)
        if console is not None and console_task is not None:
            console.stop()
            await console_task
        stop_watching.set()
        if self._watch is not None:
            await reload
        if self._backend_task is not None:
            self._backend_task.cancel()
        gateway.should_exit = True
        await gateway_task
        self._state.stopped = True
        write_state(self._state_dir, self._state)
        print("kora up: stopped every workload", flush=True)
        return 0

    def _stop_unheld_databases(self) -> None:
        """Stop each local-storage MemoryStore's embedded Postgres that outlived its memory service (one killed
        after the grace period cannot let go of it), so ``kora down`` leaves no server running."""
        from kora.memory_service.embedded import PGDATA, stop_unheld

        for pgdata in sorted((self._state_dir / MEMORY_DIR).glob(f"*/*/{PGDATA}")):
            try:
                stop_unheld(pgdata)
            except OSError as error:  # the holders' list cannot be rewritten: say so, stop the rest
                print(f"kora up: the embedded Postgres of {pgdata} was left running: {error}", file=sys.stderr)

    def _console_supervisor(self, grace: float) -> Supervisor | None:
        """The web console's supervisor (restarts, readiness, its log ``logs/console.log``), kept apart from the
        resources': it is no resource of the manifests, so ``kora status`` and the state file leave it out."""
        plan = self._console
        if plan is None:
            return None
        workload = WorkloadState(
            name=plan.name,
            kind=plan.kind,
            namespace=plan.namespace,
            gateway_url=self._gateway_url,
            direct_url=plan.direct_url,
            log=str(self._state_dir / "logs" / "console.log"),
        )
        state = UpState(pid=os.getpid(), gateway_url=self._gateway_url, started_at=time.time(), workloads=[workload])
        environment = {entry.name: entry.value or "" for entry in plan.env}
        work = {plan.ref: self._state_dir / "work" / "console"}
        return Supervisor(
            {plan.ref: plan}, {plan.ref: environment}, state, work, grace_seconds=grace, pass_env=self._pass_env
        )

    def _not_ready(self, prefix: str) -> str | None:
        """Why the workload behind gateway route ``prefix`` is not Ready (None: it is, or none is known there)."""
        for workload in self._state.workloads:
            if route_path(workload.kind, workload.namespace, workload.name) != prefix:
                continue
            if workload.phase == READY:
                return None
            why = f": {workload.message}" if workload.message else ""
            return (
                f"{workload.kind}/{workload.name} is not Ready ({workload.phase}{why}); like a Service without a "
                f"ready endpoint, the gateway sends it nothing until it is (kora status, kora logs {workload.name})"
            )
        return None

    def _watch_backends(self) -> None:
        """(Re)start checking the Proxy ModelAPIs' backends of the current graph."""
        if self._backend_task is not None:
            self._backend_task.cancel()
        by_ref = {ResourceRef(w.kind, w.namespace, w.name): w for w in self._state.workloads}
        watch = BackendWatch(proxy_backends(self._graph), by_ref, self._on_backend)
        self._backend_task = asyncio.create_task(watch.run())

    def _work_dirs(self, plans: Mapping[ResourceRef, WorkloadPlan]) -> dict[ResourceRef, Path]:
        return {ref: self._state_dir / "work" / _slug(ref) for ref in plans}

    async def _reload(self, supervisor: Supervisor) -> None:
        """Apply the manifests as they are now (``--watch``); print what failed or what changed."""
        stamp = time.strftime("%H:%M:%S")
        try:
            assert self._watch is not None  # reloads come from the watch
            graph = load_path(self._watch.path)
            plans = plan_local(
                graph, self._gateway_url, self._state_dir, {ref: plan.port for ref, plan in self._plans.items()}
            )
            environments = self._environments(graph, plans)
        except (ManifestError, LookupError) as error:
            print(f"kora up: {error}", file=sys.stderr, flush=True)
            print(f"[{stamp}] manifests not applied; the workloads keep running as they were", flush=True)
            return
        diff = diff_plans(self._plans, self._environments_now, plans, environments)
        print(f"[{stamp}] manifests changed: {diff.summary()}", flush=True)
        self._graph, self._plans, self._environments_now = graph, plans, environments
        self._record_workloads(plans)
        await supervisor.update(plans, environments, self._work_dirs(plans), diff.restarted)
        keys = {(ref.kind, ref.namespace, ref.name) for ref in plans}
        self._state.workloads = [w for w in self._state.workloads if (w.kind, w.namespace, w.name) in keys]
        for ref in diff.removed:
            self._shown_phases.pop(f"{ref.kind}/{ref.name}", None)
        self._routes.clear()
        self._routes.update(routes_from_plans(plans.values()))
        self._watch_backends()
        self._on_change()

    def _environments(
        self, graph: ResourceGraph, plans: Mapping[ResourceRef, WorkloadPlan]
    ) -> dict[ResourceRef, dict[str, str]]:
        """Each workload's environment, Secret references resolved from the generated credentials
        (:mod:`kora.local.credentials`, created here when missing), then by ``--secret-env`` or the manifests
        (:class:`~kora.local.secrets.SecretSource`); ``LookupError`` ("Kind/name: Secret ns/x key 'k' is not in
        the manifests; ...", saying how to give it) for the first found nowhere."""
        self._credentials.ensure(plans.values())
        environments: dict[ResourceRef, dict[str, str]] = {}
        for ref, plan in plans.items():

            def resolve(key: SecretKeyRef, namespace: str = ref.namespace) -> str:
                generated = self._credentials.get(namespace, key.name, key.key)
                if generated is not None:
                    return generated
                return self._secrets.value(graph, namespace, key.name, key.key)

            try:
                environments[ref] = plan.environment(resolve)
            except LookupError as error:
                raise LookupError(f"{plan.kind}/{plan.name}: {error}") from None
            if self._otel_endpoint:
                # A resource's own spec.telemetry endpoint, already in its plan, wins over the run-wide one.
                environments[ref].setdefault(names.OTEL_EXPORTER_OTLP_ENDPOINT, self._otel_endpoint)
        return environments

    def _record_workloads(self, plans: Mapping[ResourceRef, WorkloadPlan]) -> None:
        """One workload in the state per plan, in start order, with its URLs, log file and NOTE: a new one
        Pending, one already there keeps its phase, pid and restarts (workloads no longer planned stay until
        the caller drops them, after they stopped)."""
        (self._state_dir / "logs").mkdir(parents=True, exist_ok=True)
        known = {ResourceRef(w.kind, w.namespace, w.name): w for w in self._state.workloads}
        ordered: list[WorkloadState] = []
        for ref, plan in plans.items():
            if ref in known:
                workload = known.pop(ref)
                workload.gateway_url, workload.direct_url = plan.public_url, plan.direct_url
                workload.note = describe(self._graph, ref)
                workload.links = links(self._graph, ref)
                ordered.append(workload)
                continue
            ordered.append(
                WorkloadState(
                    name=ref.name,
                    kind=ref.kind,
                    namespace=ref.namespace,
                    gateway_url=plan.public_url,
                    direct_url=plan.direct_url,
                    log=str(self._state_dir / "logs" / f"{_slug(ref)}.log"),
                    note=describe(self._graph, ref),
                    links=links(self._graph, ref),
                )
            )
        self._state.workloads = ordered + list(known.values())

    def _on_change(self) -> None:
        """The supervisor changed the state: write it, then tell the user what changed."""
        write_state(self._state_dir, self._state)
        self._show_phase_changes()
        self._show_when_all_ready()

    def _on_backend(self, workload: WorkloadState, reason: str | None) -> None:
        """A Proxy ModelAPI's backend stopped or started answering: write the state, tell the user."""
        write_state(self._state_dir, self._state)
        news = f"backend unreachable ({reason}); requests through it answer 502" if reason else "backend answers"
        print(f"[{time.strftime('%H:%M:%S')}] {workload.kind}/{workload.name}: {news}", flush=True)

    def _show_phase_changes(self) -> None:
        for workload in self._state.workloads:
            key = f"{workload.kind}/{workload.name}"
            if self._shown_phases.get(key, PENDING) != workload.phase:
                self._shown_phases[key] = workload.phase
                detail = f" ({workload.message})" if workload.phase == FAILED and workload.message else ""
                print(f"[{time.strftime('%H:%M:%S')}] {key}: {workload.phase}{detail}", flush=True)

    def _show_when_all_ready(self) -> None:
        # Once per run: a workload that restarts later is reported by its phase lines only.
        if self._all_ready_shown or not all(w.phase == READY for w in self._state.workloads):
            return
        self._all_ready_shown = True
        workloads = self._state.workloads
        print(f"\nall {len(workloads)} workloads Ready in {time.monotonic() - self._started:.1f} s\n", flush=True)
        print(render_table(self._state), flush=True)
        if self._console is not None:
            print(f"\nweb console: {self._gateway_url}/")
        print("\nkora chat <agent> to talk, kora status, kora logs <name> [-f], kora down (or Ctrl-C) to stop.")


def up(
    path: Annotated[str, typer.Argument(help="A manifest file or a folder of *.yaml files.")],
    port: Annotated[int, typer.Option(help="Gateway port on 127.0.0.1 (0: any free port).", min=0, max=65535)] = 8080,
    state_dir: Annotated[
        Path, typer.Option(help="Directory of the state file, logs and work dirs.")
    ] = DEFAULT_STATE_DIR,
    grace: Annotated[float, typer.Option(help="Seconds between a workload's SIGTERM and its SIGKILL.", min=0)] = 5.0,
    watch: Annotated[
        bool,
        typer.Option(
            "--watch",
            help="Apply edits of the manifests while running: restart only the workloads whose plan changed.",
        ),
    ] = False,
    pass_env: Annotated[
        list[str] | None,
        typer.Option(
            "--pass-env",
            metavar="NAME",
            help="Hand this variable of your shell on to every workload (repeatable); by default they get only "
            "PATH, HOME, locale, TZ, temp dirs and what their manifests set.",
        ),
    ] = None,
    otel_endpoint: Annotated[
        str | None,
        typer.Option(
            "--otel-endpoint",
            envvar=names.OTEL_EXPORTER_OTLP_ENDPOINT,
            help="OTLP endpoint (e.g. http://127.0.0.1:4318) every workload and the gateway export traces and "
            "metrics to; an Agent's spec.telemetry.endpoint wins for that agent. See docs/telemetry.md.",
        ),
    ] = None,
    console: Annotated[
        bool,
        typer.Option(
            "--console/--no-console",
            help="Serve the web console (kora console) at the gateway's root (docs/console.md).",
        ),
    ] = True,
    trace_url: Annotated[
        str | None,
        typer.Option(
            "--trace-url",
            envvar=names.CONSOLE_TRACE_URL,
            metavar="URL",
            help="Your trace viewer's URL for one trace, with {trace_id} where the trace id goes (e.g. "
            "http://localhost:16686/trace/{trace_id} for Jaeger): the console links each turn's trace id there. "
            "See docs/telemetry.md.",
        ),
    ] = None,
    secret_env: Annotated[
        list[str] | None,
        typer.Option(
            "--secret-env",
            metavar=SECRET_ENV_FORMAT,
            help="Give a secretKeyRef's value from this variable of your shell instead of a Secret document in "
            "the manifests (repeatable; namespace default when omitted), e.g. openai/api-key=OPENAI_API_KEY.",
        ),
    ] = None,
) -> int:
    """Run Kora manifests as local processes."""
    try:
        graph = load_path(path)
    except ManifestError as error:
        print(f"kora up: {error}", file=sys.stderr)
        return 2
    # The loader's warnings name Secrets missing from the manifests, which "may live in the cluster": here
    # each reference is resolved before anything starts (--secret-env or a Secret document), or kora up
    # exits saying how to give it.
    try:
        secrets = SecretSource(parse_secret_env(secret_env or (), os.environ))
    except ValueError as error:
        print(f"kora up: {error}", file=sys.stderr)
        return 2
    for namespace, name, key in secrets.unused(graph):
        print(f"kora up: warning: --secret-env {namespace}/{name}/{key}: no manifest references it", file=sys.stderr)
    for resource in graph:
        if resource.spec.container.image is not None:
            print(
                f"kora up: warning: {resource.kind} {resource.metadata.name}: spec.container.image is for a cluster; "
                "kora up runs this installation's kora as a local process",
                file=sys.stderr,
            )
    trace_url = (trace_url or "").strip() or None
    if trace_url is not None:
        try:
            check_trace_url(trace_url)
        except ValueError as error:
            print(f"kora up: --trace-url ({names.CONSOLE_TRACE_URL}): {error}", file=sys.stderr)
            return 2
    state_dir = state_dir.resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    otel_endpoint = (otel_endpoint or "").strip() or None
    if otel_endpoint:
        # The gateway runs in this process: its SDK reads the endpoint from the environment like every workload's.
        os.environ[names.OTEL_EXPORTER_OTLP_ENDPOINT] = otel_endpoint
    try:
        telemetry = setup_telemetry("Gateway", "kora-up", component="kora up")
    except SettingsError as error:
        print(error, file=sys.stderr)
        return 2
    with contextlib.suppress(FileNotFoundError, ValueError):
        previous = read_state(state_dir)
        if not previous.stopped and previous.pid != os.getpid() and process_alive(previous.pid):
            print(f"kora up: already running (pid {previous.pid}) with state dir {state_dir}", file=sys.stderr)
            return 2
        # A kora up killed with SIGKILL (or on a system without a parent-death signal) may have left workloads
        # holding their ports: stop them before new ones start.
        stop_leftovers(state_dir, previous, grace)
    try:
        gateway_sock = bind_socket("127.0.0.1", port)
    except OSError as error:
        print(
            f"kora up: cannot listen on 127.0.0.1:{port}: {error}; choose another port with --port N "
            "(--port 0: any free one)",
            file=sys.stderr,
        )
        return 2
    try:
        plans = plan_local(graph, f"http://127.0.0.1:{gateway_sock.getsockname()[1]}", state_dir)
    except ManifestError as error:
        gateway_sock.close()
        print(f"kora up: {error}", file=sys.stderr)
        return 2
    watching = ManifestWatch.of(Path(path)) if watch else None
    # From here kora up owns its stop signals. One that comes before the loop's handlers are installed is
    # remembered, not raised: asyncio.Runner would otherwise turn Ctrl-C into a cancellation of the run, which
    # could land mid-start-up (a traceback, or lost, leaving kora up running).
    early_stops: list[int] = []
    previous_handlers = {
        stop_signal: signal.signal(stop_signal, lambda signum, frame: early_stops.append(signum))
        for stop_signal in _stop_signals()
    }
    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            run = _LocalRun(
                graph,
                plans,
                gateway_sock,
                state_dir,
                telemetry,
                tuple(pass_env or ()),
                otel_endpoint,
                watching,
                secrets,
                console,
                trace_url,
            )
            return runner.run(run.run(grace, early_stops))
    finally:
        for stop_signal, handler in previous_handlers.items():
            signal.signal(stop_signal, handler)
        telemetry.shutdown()


def _stop_signals() -> list[signal.Signals]:
    """SIGINT (Ctrl-C), SIGTERM (``kora down``) and SIGHUP (the terminal closed) unless ignored: under ``nohup``
    SIGHUP is ignored and must stay so. Each stops the workloads in order; without a handler SIGHUP would end
    ``kora up`` at once and leave its workloads to the parent-death signal alone."""
    hangup = [signal.SIGHUP] if hasattr(signal, "SIGHUP") and signal.getsignal(signal.SIGHUP) != signal.SIG_IGN else []
    return [signal.SIGINT, signal.SIGTERM, *hangup]


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    # Measured (bench/bench_up.py): on the default asyncio loop the gateway added ~44 ms per request (small
    # writes held back until the peer's delayed ACK); on uvloop, which uvicorn[standard] installs, ~1 ms.
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop ships with uvicorn[standard] on Linux and macOS
        return None
    return uvloop.new_event_loop
