"""Importing the user's own code by name, as ``python -m`` would find it."""

from __future__ import annotations

import importlib
import os
import sys


def working_folder_first() -> str:
    """Put the working folder at the front of ``sys.path`` (as ``python -m`` does) unless it is
    already there, so a ``pkg.module`` reference resolves from the folder the command was started
    in whether it runs as ``statemachine-agent`` (whose ``sys.path`` lacks that folder) or as
    ``python -m statemachine_agent``; returns the folder."""
    folder = os.getcwd()
    if not sys.path or sys.path[0] not in ("", folder):
        sys.path.insert(0, folder)
        importlib.invalidate_caches()
    return folder
