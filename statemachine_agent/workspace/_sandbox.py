"""The sandbox ``run_command`` runs its shell in: bubblewrap (``bwrap``) on Linux.

`Sandbox` is the configuration (what is writable, hidden, passed through; whether the network is
on); `check_sandbox` finds out whether it can be had on this machine (``bwrap`` on PATH and able to
create namespaces) and returns a `SandboxStatus`; `bwrap_arguments` and `sandbox_environment`
turn both into the ``bwrap`` command line and the environment a command gets.

Inside the sandbox (see `bwrap_arguments` for the exact mounts):

- the whole file system is visible read-only (``--ro-bind / /``), except what is hidden;
- the workspace and the `Sandbox.writable` paths are read-write (``--bind``); the folders that
  lead to them stay read-only, so ``echo x > ../outside.txt`` fails with "Read-only file system";
- ``/tmp`` is a private, empty tmpfs, dropped when the command ends;
- the `Sandbox.hidden` paths (default `DEFAULT_HIDDEN`) are covered by an empty read-only tmpfs
  (folders) or ``/dev/null`` (files);
- new network, PID, IPC and UTS namespaces: no network unless `Sandbox.allow_network`, and the
  command sees (and can signal) only its own processes; every capability is dropped, so even
  as root it cannot remount anything;
- only the variables named in `Sandbox.env` (default `DEFAULT_ENV`) reach the command, minus any
  whose value holds the value of a secret-looking variable of the parent (``*_API_KEY``,
  ``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``), and ``TMPDIR=/tmp``.

Unix sockets on the visible file system (e.g. ``/run/docker.sock``) can still be connected to:
add them to `Sandbox.hidden` when that matters.
"""

from __future__ import annotations

import fnmatch
import functools
import logging
import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from .._errors import SandboxUnavailableError, UsageError

logger = logging.getLogger("statemachine_agent.workspace")

SandboxMode = Literal["auto", "require", "off"]
"""``auto``: sandboxed where bubblewrap works, else unsandboxed with a warning; ``require``:
refuse to start without it; ``off``: never sandboxed."""

DEFAULT_HIDDEN: tuple[str, ...] = ("~/.ssh", "~/.aws", "~/.config/gcloud", "~/.netrc")
"""Paths hidden from sandboxed commands (``~`` is the ``HOME`` of the moment a command starts)."""

DEFAULT_ENV: tuple[str, ...] = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TERM",
    "TZ",
)
"""Environment variables passed to sandboxed commands (shell-style patterns); nothing else is."""

SECRET_NAMES: tuple[str, ...] = ("*_API_KEY", "*TOKEN*", "*SECRET*", "*PASSWORD*")
"""Variables of the parent whose values never reach a sandboxed command, even under another
name (``ANTHROPIC_API_KEY`` among them)."""

INSTALL_HINT = (
    "Install bubblewrap: apt-get install bubblewrap (Debian, Ubuntu), dnf install bubblewrap "
    "(Fedora), pacman -S bubblewrap (Arch)."
)
PROBE_TIMEOUT_SECONDS = 10.0
_TMP = Path("/tmp")
_MIN_SECRET_CHARS = 8


class Sandbox(BaseModel):
    """How ``run_command`` is sandboxed (configuration only; see `check_sandbox`). Its fields
    are given by keyword: ``Sandbox(mode="require", writable=("~/.cache",))``.

    Attributes:
        mode: ``auto`` (default: bubblewrap where it works, else unsandboxed with a warning),
            ``require`` (`check_sandbox` raises `SandboxUnavailableError` without it) or ``off``.
        allow_network: keep the host's network (default: a new, empty network namespace).
        writable: paths made read-write besides the workspace (each must exist).
        hidden: paths covered by an empty folder or file (``~`` expanded when a command starts);
            replaces `DEFAULT_HIDDEN`, so add to it: ``hidden=(*DEFAULT_HIDDEN, "~/.kube")``.
        env: names (shell-style patterns) of the variables passed through; replaces
            `DEFAULT_ENV`.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: SandboxMode = "auto"
    allow_network: bool = False
    writable: tuple[Path, ...] = ()
    hidden: tuple[Path, ...] = tuple(Path(p) for p in DEFAULT_HIDDEN)
    env: tuple[str, ...] = DEFAULT_ENV


@dataclass(frozen=True)
class SandboxStatus:
    """What `check_sandbox` found: whether commands will really be sandboxed, and why not.

    Attributes:
        config: the configuration checked.
        bwrap: the path of the ``bwrap`` executable, when commands are sandboxed (else None).
        problem: why the sandbox is unavailable (None when it is active, or ``mode="off"``).
    """

    config: Sandbox
    bwrap: str | None = None
    problem: str | None = None

    @property
    def active(self) -> bool:
        """Commands run inside bubblewrap."""
        return self.bwrap is not None

    def describe(self) -> str:
        """One line for a person: what commands can reach."""
        if self.active:
            network = "on" if self.config.allow_network else "off"
            writable = ", ".join(["the workspace", *map(str, self.config.writable)])
            return (
                f"run_command is sandboxed (bubblewrap): writes only to {writable} and a "
                f"private /tmp; network {network}; hidden: "
                f"{', '.join(map(str, self.config.hidden)) or 'nothing'}; "
                "environment reduced to an allow-list"
            )
        if self.config.mode == "off":
            return (
                "run_command is NOT sandboxed (sandbox turned off): commands run with all your "
                "permissions, network and environment"
            )
        return (
            f"run_command is NOT sandboxed ({self.problem}): commands run with all your "
            "permissions, network and environment"
        )

    def as_dict(self) -> dict[str, object]:
        """The status as JSON-ready data (for ``--json``)."""
        return {
            "active": self.active,
            "mode": self.config.mode,
            "allow_network": self.config.allow_network,
            "writable": [str(p) for p in self.config.writable],
            "hidden": [str(p) for p in self.config.hidden],
            "problem": self.problem,
            "summary": self.describe(),
        }


@functools.lru_cache(maxsize=8)
def _probe(bwrap: str) -> str | None:
    """Why ``bwrap`` cannot run a sandbox like ours here (None: it can). Cached per path."""
    argv = [bwrap, *_namespace_flags(allow_network=False), "--ro-bind", "/", "/"]
    argv += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--", "/bin/sh", "-c", "true"]
    try:
        done = subprocess.run(
            argv, capture_output=True, timeout=PROBE_TIMEOUT_SECONDS, env={}, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap ({bwrap}) could not be run: {exc}"
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines()
        reason = said[-1] if said else f"exit code {done.returncode}"
        return f"bwrap ({bwrap}) cannot create a sandbox here: {reason}"
    return None


def check_sandbox(config: Sandbox | None = None, *, warn: bool = True) -> SandboxStatus:
    """Find out whether ``config`` can be had here: ``bwrap`` on PATH and working.

    ``mode="auto"`` without it returns an inactive status saying why, and (with ``warn``) logs
    a warning on the logger ``statemachine_agent.workspace``; ``mode="off"`` checks nothing.
    Whether ``bwrap`` works is found out once per process (it runs ``bwrap`` once).

    Raises:
        SandboxUnavailableError: ``mode="require"`` and bubblewrap is missing or fails (the
            message names bubblewrap and how to install it).
        UsageError: a `Sandbox.writable` path does not exist.
    """
    config = config if config is not None else Sandbox()
    if config.mode == "off":
        return SandboxStatus(config)
    for path in config.writable:
        if not path.expanduser().exists():
            raise UsageError(f"sandbox writable path {str(path)!r} does not exist")
    bwrap = shutil.which("bwrap")
    problem = "bubblewrap (bwrap) is not on PATH" if bwrap is None else _probe(bwrap)
    if problem is None:
        return SandboxStatus(config, bwrap=bwrap)
    if config.mode == "require":
        raise SandboxUnavailableError(
            f"run_command must be sandboxed (sandbox mode 'require'), but {problem}. {INSTALL_HINT}"
        )
    if warn:
        logger.warning("%s; run_command runs commands without a sandbox", problem)
    return SandboxStatus(config, problem=problem)


def _namespace_flags(*, allow_network: bool) -> list[str]:
    flags = ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if not allow_network:
        flags.append("--unshare-net")
    return [*flags, "--die-with-parent", "--cap-drop", "ALL"]


def _real(path: Path | str) -> Path:
    return Path(os.path.realpath(Path(path).expanduser()))


def _under(path: Path, folder: Path) -> bool:
    """``path`` is ``folder`` or inside it."""
    return path == folder or folder in path.parents


def bwrap_arguments(config: Sandbox, root: Path) -> list[str]:
    """The ``bwrap`` options (without the executable and the command) for a command in ``root``.

    Mounts, parents before children: ``--ro-bind / /``, ``--dev /dev``, ``--proc /proc``, a
    tmpfs on ``/tmp``, the hidden paths that would be visible (a read-only empty tmpfs on a
    folder, ``/dev/null`` on a file), ``--bind`` of ``root`` and each writable path. A writable
    path inside ``/tmp`` gets a read-only tmpfs on its top folder there (``/tmp/pytest-of-x``)
    first, so the folders around it stay read-only while the rest of ``/tmp`` is writable.

    Raises:
        UsageError: a hidden path is the workspace or a writable path.
    """
    writable = list(dict.fromkeys([_real(root), *(_real(p) for p in config.writable)]))
    hidden = [_real(p) for p in config.hidden if os.path.lexists(Path(p).expanduser())]
    for path in hidden:
        if path in writable:
            raise UsageError(f"sandbox: {path} is both hidden and writable")
    private_tmp = not any(_under(_TMP, w) for w in writable)
    # (depth, order, arguments): parents are mounted before what they contain.
    mounts: list[tuple[int, int, list[str]]] = []
    read_only_after: list[Path] = []
    masks = [_TMP] if private_tmp else []
    if private_tmp:
        mounts.append((1, 0, ["--tmpfs", str(_TMP)]))
        tops = {_TMP / w.relative_to(_TMP).parts[0] for w in writable if _TMP in w.parents}
        for top in sorted(tops - set(writable)):
            mounts.append((2, 0, ["--tmpfs", str(top)]))
            read_only_after.append(top)
            masks.append(top)
    for path in hidden:
        # Visible only when the deepest mount above it is the root or a writable bind.
        above = [m for m in (*masks, *hidden, *writable) if m != path and m in path.parents]
        deepest = max(above, key=lambda m: len(m.parts), default=None)
        if deepest is not None and deepest not in writable:
            continue
        if path.is_dir():
            mounts.append((len(path.parts), 0, ["--tmpfs", str(path)]))
            read_only_after.append(path)
        else:
            mounts.append((len(path.parts), 0, ["--ro-bind", "/dev/null", str(path)]))
    for path in writable:
        mounts.append((len(path.parts), 1, ["--bind", str(path), str(path)]))
    arguments = [*_namespace_flags(allow_network=config.allow_network), "--ro-bind", "/", "/"]
    arguments += ["--dev", "/dev", "--proc", "/proc"]
    for _, _, mount in sorted(mounts, key=lambda m: (m[0], m[1])):
        arguments += mount
    for path in read_only_after:
        arguments += ["--remount-ro", str(path)]
    return arguments


def sandbox_environment(config: Sandbox, environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``environ`` a sandboxed command gets: those `Sandbox.env` names, minus
    any holding a secret's value (see `SECRET_NAMES`), plus ``TMPDIR=/tmp``."""
    secrets = [
        value
        for name, value in environ.items()
        if len(value) >= _MIN_SECRET_CHARS
        and any(fnmatch.fnmatchcase(name.upper(), pattern) for pattern in SECRET_NAMES)
    ]
    passed = {
        name: value
        for name, value in environ.items()
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in config.env)
        and not any(secret in value for secret in secrets)
    }
    passed["TMPDIR"] = str(_TMP)
    return passed
