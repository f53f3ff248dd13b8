"""Fixtures of the durable tests: a throwaway Postgres server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from throwaway_pg import INSTALL_HINT, ThrowawayPostgres, bin_dir


@pytest.fixture
def postgres() -> Iterator[ThrowawayPostgres]:
    """A running throwaway server (skipped, saying why, where no PostgreSQL binaries exist)."""
    binaries = bin_dir()
    if binaries is None:
        pytest.skip(
            f"no PostgreSQL binaries (initdb, pg_ctl) on PATH or in /usr/lib/postgresql: {INSTALL_HINT}"
        )
    server = ThrowawayPostgres(binaries)
    try:
        server.start()
        yield server
    finally:
        server.stop()
