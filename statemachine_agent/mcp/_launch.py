"""The launcher of a stdio MCP server (run as a script, standard library only):
``python _launch.py GROUP_FILE COMMAND ARGS...``.

It leads its own process group (the ``mcp`` client starts it in a new session; if not, it calls
``setsid``), writes that group's id to ``GROUP_FILE`` (written whole, then renamed), and
becomes ``COMMAND`` (``execvp``: same process, same group). `MCPServer` reads the file, so it
ends exactly this server's group when the agent closes, never another server's (two servers of
the same command included).
"""

from __future__ import annotations

import contextlib
import os
import sys


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: _launch.py GROUP_FILE COMMAND [ARGS...]", file=sys.stderr)
        return 2
    group_file, command = argv[0], argv[1:]
    with contextlib.suppress(OSError):  # already a group leader: the client made the session
        os.setsid()
    partial = f"{group_file}.partial"
    with open(partial, "w", encoding="ascii") as out:
        out.write(str(os.getpgid(0)))
    os.replace(partial, group_file)
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"cannot run {command[0]!r}: {exc}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
