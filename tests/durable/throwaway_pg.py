"""A throwaway PostgreSQL server for the durable tests and benchmarks: ``initdb`` + ``pg_ctl`` in
a fresh temporary folder, listening on 127.0.0.1 on a free port, stopped and deleted at the end.
Postgres refuses to run as root: as root, the server runs as the ``postgres`` user (or ``nobody``)
through ``runuser``."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

INSTALL_HINT = "install the postgresql package (Debian: apt-get install postgresql)"


def bin_dir() -> Path | None:
    """The folder holding ``initdb`` and ``pg_ctl``: from PATH, else the newest Debian install."""
    found = shutil.which("initdb")
    if found is not None and shutil.which("pg_ctl") is not None:
        return Path(found).resolve().parent
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    return candidates[-1].parent if candidates else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _unprivileged_user() -> str:
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise RuntimeError("running as root and neither a 'postgres' nor a 'nobody' user exists")


class ThrowawayPostgres:
    """Start with `start`, stop with `stop`; ``url`` is a DBOS system-database URL (the database
    itself is created by DBOS).

    Args:
        binaries: the folder with ``initdb`` and ``pg_ctl``.
    """

    def __init__(self, binaries: Path) -> None:
        self.binaries = binaries
        self.folder = Path(tempfile.mkdtemp(prefix="sma-pg-"))
        self.data = self.folder / "data"
        self.port = _free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/statemachine_agent"
        self._prefix: list[str] = []
        if os.geteuid() == 0:
            user = _unprivileged_user()
            shutil.chown(self.folder, user)
            self._prefix = ["runuser", "-u", user, "--"]

    def _run(self, *args: str) -> None:
        done = subprocess.run(
            [*self._prefix, *args], capture_output=True, text=True, timeout=60, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")

    def start(self) -> None:
        """Create the cluster and start the server (waits until it accepts connections).

        Raises:
            RuntimeError: initdb or pg_ctl failed (their output is in the message).
        """
        self._run(
            str(self.binaries / "initdb"),
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth=trust",
            "--no-sync",
            "-E",
            "UTF8",
        )
        options = (
            f"-p {self.port} -h 127.0.0.1 -k {self.folder} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
            "-c max_connections=300"
        )
        self._run(
            str(self.binaries / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.folder / "server.log"),
            "-w",
            "-o",
            options,
            "start",
        )

    def stop(self) -> None:
        """Stop the server at once and delete its folder."""
        try:
            if (self.data / "postmaster.pid").exists():
                self._run(
                    str(self.binaries / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"
                )
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)
