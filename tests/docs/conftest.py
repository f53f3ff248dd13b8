"""The built site, shared by the tests of this folder (built once per session)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .site import CONFIG, build


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site as ``mkdocs build --strict`` makes it (the build's output is shown if it fails)."""
    site_dir = tmp_path_factory.mktemp("site")
    done = build(CONFIG, site_dir)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    return site_dir
