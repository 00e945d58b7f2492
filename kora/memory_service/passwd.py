"""A user name for a uid that has none, so the embedded Postgres runs under any non-root uid.

Postgres (``initdb``, the server) refuses to run when the effective uid has no entry in the user database ("could
not look up effective user ID 10001: user does not exist"), and clusters run containers under uids the image
never heard of: the operator's, a PodSecurity ``restricted`` namespace's, OpenShift's random one per namespace.
The remedy the official ``postgres`` image uses is libnss-wrapper: preloaded (``LD_PRELOAD``), it answers user and
group look-ups from the files named by ``NSS_WRAPPER_PASSWD`` and ``NSS_WRAPPER_GROUP``. :func:`postgres_environment`
writes those files (the system's entries plus one for the current uid and gid) when a look-up fails, and returns
the variables for the Postgres processes; when the uid is known, or is root (pgserver then runs Postgres as its own
system user ``pgserver``), there is nothing to do. Kora's image installs libnss-wrapper (Debian's package).
"""

from __future__ import annotations

import ctypes.util
import grp
import os
import pwd
from pathlib import Path

from kora.core.errors import MissingUserError

#: The user name given to a uid without one (``kora-<uid>`` when the system already has a ``kora``).
USER_NAME = "kora"
#: The file name stem of the library (``libnss_wrapper.so``), as ``ctypes.util.find_library`` looks it up.
LIBRARY = "nss_wrapper"


def _known_uid(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


def _known_gid(gid: int) -> bool:
    try:
        grp.getgrgid(gid)
    except KeyError:
        return False
    return True


def _read(path: Path) -> str:
    try:
        text = path.read_text()
    except OSError:
        return ""
    return text if not text or text.endswith("\n") else text + "\n"


def _free_name(entries: str, number: int) -> str:
    taken = {line.split(":", 1)[0] for line in entries.splitlines()}
    return USER_NAME if USER_NAME not in taken else f"{USER_NAME}-{number}"


def _write(path: Path, text: str) -> None:
    """Replace ``path`` whole (a reader never sees half a file)."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    partial.replace(path)


def postgres_environment(directory: Path) -> dict[str, str]:
    """The variables the embedded Postgres's processes need so the current uid and gid have names: empty when
    they have them (or the process is root); otherwise ``LD_PRELOAD`` (libnss-wrapper first), ``NSS_WRAPPER_PASSWD``
    and ``NSS_WRAPPER_GROUP``, naming files written in ``directory`` (created; must be writable). The home of the
    user is ``HOME`` (or ``directory``).

    Raises :class:`MissingUserError` when a name is missing and libnss-wrapper is not installed.
    """
    uid, gid = os.geteuid(), os.getegid()
    if uid == 0 or (_known_uid(uid) and _known_gid(gid)):
        return {}
    library = ctypes.util.find_library(LIBRARY)
    if library is None:
        raise MissingUserError(
            f"uid {uid} (gid {gid}) has no entry in /etc/passwd or /etc/group, and Postgres needs one: install "
            "libnss-wrapper (Debian and Ubuntu: apt-get install libnss-wrapper), which Kora's image has, or run "
            "as a uid the image knows"
        )
    directory.mkdir(parents=True, exist_ok=True)
    home = os.environ.get("HOME") or str(directory)
    passwd, group = directory / "passwd", directory / "group"
    users = _read(Path("/etc/passwd"))
    if not _known_uid(uid):
        users += f"{_free_name(users, uid)}:x:{uid}:{gid}:Kora:{home}:/usr/sbin/nologin\n"
    groups = _read(Path("/etc/group"))
    if not _known_gid(gid):
        groups += f"{_free_name(groups, gid)}:x:{gid}:\n"
    _write(passwd, users)
    _write(group, groups)
    preload = " ".join(filter(None, [library, os.environ.get("LD_PRELOAD", "")]))
    return {"LD_PRELOAD": preload, "NSS_WRAPPER_PASSWD": str(passwd), "NSS_WRAPPER_GROUP": str(group)}
