"""Building the site for the tests: ``mkdocs build --strict`` as CI runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .blocks import ROOT


def build(config: Path, site_dir: Path) -> subprocess.CompletedProcess[str]:
    """Run ``mkdocs build --strict`` on ``config`` into ``site_dir`` (cwd: the config's folder,
    where the benchmarks page's snippet path starts). Not ``-q``: it hides the warnings that
    ``--strict`` counts, and the build would pass with a broken link."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "-f",
            str(config),
            "-d",
            str(site_dir),
        ],
        cwd=config.parent,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


CONFIG = ROOT / "mkdocs.yml"
