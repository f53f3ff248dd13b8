"""Ctrl-C while a run is in progress, and the ``[y/n]`` prompts of calls a person must allow
(`Interrupts`)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

from rich.console import Console

from .._agent import Agent
from ..workspace import CallPreview
from ._view import LiveView, preview_renderable

ABORT_REASON = "interrupted by the user (Ctrl-C)"


class Interrupts:
    """Ctrl-C (SIGINT) while a run is in progress, and the confirmation prompts.

    The first Ctrl-C aborts the run cleanly (the engine answers every open call; the call of a
    prompt that is waiting is answered as interrupted by the user, not as declined); a second
    one quits at once. The handler is installed with
    ``loop.add_signal_handler``, so it wakes the loop whichever thread the signal lands on; for
    the same reason prompts read the terminal through the loop instead of a blocking ``input``.

    Args:
        agent: the running agent.
        view: paused during prompts and told when an abort is on its way (may be None).
        console: where prompts are written.
    """

    def __init__(self, agent: Agent, view: LiveView | None, console: Console) -> None:
        self.agent = agent
        self.view = view
        self.console = console
        self.count = 0
        self._answer: asyncio.Future[str | None] | None = None
        self._prompting: asyncio.Lock | None = None

    def _on_sigint(self) -> None:
        self.count += 1
        if self.count > 1:
            raise KeyboardInterrupt
        if self._answer is not None and not self._answer.done():
            self._answer.set_result(None)
        self.agent.abort(ABORT_REASON)
        if self.view is not None:
            self.view.note("Aborting… (press Ctrl-C again to quit at once)")

    @contextmanager
    def installed(self, loop: asyncio.AbstractEventLoop) -> Iterator[None]:
        """Handle SIGINT inside the block (where the loop can: its main thread, not Windows)."""
        try:
            loop.add_signal_handler(signal.SIGINT, self._on_sigint)
        except (NotImplementedError, RuntimeError, ValueError):
            yield
            return
        try:
            yield
        finally:
            loop.remove_signal_handler(signal.SIGINT)

    async def confirm(self, question: str) -> bool | None:
        """Ask the person at the terminal, after the call's preview (a `Question`'s: a diff,
        a new file's head, a command). Returns True for yes; False for no, an empty answer or
        end of input; None when Ctrl-C interrupted the prompt (or came before it): the call is
        then answered as interrupted, not declined. One prompt at a time; the live view holds
        its output meanwhile."""
        if self._prompting is None:
            self._prompting = asyncio.Lock()
        async with self._prompting:
            if self.count:  # Ctrl-C came already: the run is being aborted
                return None
            with self.view.paused() if self.view is not None else nullcontext():
                preview = getattr(question, "preview", None)
                # A one-line command is in the question itself.
                if isinstance(preview, CallPreview) and (
                    preview.kind != "command" or "\n" in preview.text
                ):
                    self.console.print(preview_renderable(preview), soft_wrap=True)
                return await self._ask(question)

    async def _ask(self, question: str) -> bool | None:
        # rich's Confirm blocks in input(); this is its prompt, read without blocking the loop.
        loop = asyncio.get_running_loop()
        fd = sys.stdin.fileno()
        while True:
            self.console.print(f"{question} [bold magenta]\\[y/n][/] [cyan](n)[/]: ", end="")
            answer: asyncio.Future[str | None] = loop.create_future()
            self._answer = answer

            def on_readable(answer: asyncio.Future[str | None] = answer) -> None:
                if not answer.done():
                    answer.set_result(os.read(fd, 4096).decode(errors="replace"))

            loop.add_reader(fd, on_readable)
            try:
                line = await answer
            finally:
                loop.remove_reader(fd)
                self._answer = None
            if line is None:  # Ctrl-C
                self.console.print()
                return None
            if not line:  # end of input
                self.console.print()
                return False
            reply = line.strip().lower()
            if reply in ("y", "yes"):
                return True
            if reply in ("", "n", "no"):
                return False
            self.console.print("[prompt.invalid]Please enter Y or N")
