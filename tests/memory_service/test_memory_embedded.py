"""What the embedded Postgres of ``local`` storage settles before it starts: a lock left by a killed server is
removed, a live server's never; an initialisation cut short is redone, never started on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import psycopg
import pytest

from kora.memory_service import embedded

pytestmark = pytest.mark.integration


def _lock_text(pid: int, pgdata: Path, socket_dir: Path) -> str:
    """A ``postmaster.pid`` as Postgres 18 writes it for a server on a unix socket."""
    return f"{pid}\n{pgdata}\n1795685267\n5432\n{socket_dir}\n\n  2148640         4\nready   \n"


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_live_servers_lock_is_kept(postgres: str) -> None:
    pgdata = Path(parse_qs(urlparse(postgres).query)["host"][0])
    lock = (pgdata / embedded.POSTMASTER_PID).read_text()
    assert embedded.is_postmaster_of(int(lock.split()[0]), pgdata)
    assert embedded.clear_stale_lock(pgdata) is False
    assert (pgdata / embedded.POSTMASTER_PID).read_text() == lock
    with psycopg.connect(postgres) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_a_lock_naming_another_live_process_or_a_dead_one_is_removed(postgres: str, tmp_path: Path) -> None:
    live_server = Path(parse_qs(urlparse(postgres).query)["host"][0])
    server_pid = int((live_server / embedded.POSTMASTER_PID).read_text().split()[0])
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        # A live process that is no postmaster; a dead pid; the live postmaster of another data directory.
        for pid in (sleeper.pid, _dead_pid(), server_pid):
            pgdata = tmp_path / f"pgdata-{pid}"
            pgdata.mkdir()
            (pgdata / embedded.POSTMASTER_PID).write_text(_lock_text(pid, pgdata, pgdata))
            (pgdata / ".s.PGSQL.5432.lock").write_text(f"{pid}\n{pgdata}\n")
            (pgdata / ".s.PGSQL.5433.lock").write_text("1\nsomeone else's\n")
            assert not embedded.is_postmaster_of(pid, pgdata)
            assert embedded.clear_stale_lock(pgdata) is True
            assert sorted(p.name for p in pgdata.iterdir()) == [".s.PGSQL.5433.lock"]
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_negative_pid_is_a_killed_initdb_and_an_unreadable_lock_is_left_to_postgres(tmp_path: Path) -> None:
    (tmp_path / embedded.POSTMASTER_PID).write_text(f"-{_dead_pid()}\n{tmp_path}\n")
    assert embedded.clear_stale_lock(tmp_path) is True
    assert not (tmp_path / embedded.POSTMASTER_PID).exists()
    (tmp_path / embedded.POSTMASTER_PID).write_text("not a pid\n")
    assert embedded.clear_stale_lock(tmp_path) is False
    assert embedded.clear_stale_lock(tmp_path / "nothing-here") is False


def test_an_interrupted_initialisation_is_discarded_and_redone(tmp_path: Path) -> None:
    # What a kill during initdb left: its working directory, and an empty data directory (an older Kora's).
    staging = tmp_path / embedded.PGDATA_INITIALISING
    staging.mkdir()
    (staging / "PG_VERSION").write_text("18\n")
    (tmp_path / embedded.PGDATA).mkdir()
    embedded.initialise(tmp_path)
    pgdata = tmp_path / embedded.PGDATA
    assert (pgdata / "PG_VERSION").read_text().strip() == "18"
    assert (pgdata / "postgresql.conf").exists()
    assert not staging.exists()
    made = sorted(p.name for p in pgdata.iterdir())
    embedded.initialise(tmp_path)  # a data directory already: untouched
    assert sorted(p.name for p in pgdata.iterdir()) == made
