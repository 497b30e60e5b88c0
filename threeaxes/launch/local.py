"""The ranks of one :func:`threeaxes.launch.launch` call on this machine.

The four phases (rendezvous, spawn, wait loop, teardown) are described in
``threeaxes.launch.launcher``; each is a method here. ``worker.py`` is the other end
of every pipe.
"""

from __future__ import annotations

import datetime
import linecache
import multiprocessing
import multiprocessing.connection
import os
import pickle
import re
import sys
import time
from collections.abc import Iterable
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerContext, SpawnContext
from multiprocessing.process import BaseProcess
from typing import Any, NoReturn, cast

import torch.distributed as dist

from threeaxes.launch import prestart, worker

# Starting the processes and joining the group has its own limit; `timeout` counts
# from the moment fn is running on every rank.
STARTUP_TIMEOUT_S = 120.0
_EXIT_GRACE_S = 10.0  # finished ranks get this long to leave the group before being stopped
_STACK_WAIT_S = 1.0  # how long a timeout waits for stuck ranks to say where they are
_POLL_S = 0.2  # the longest the wait loop blocks before it checks for an interrupt



class RankError(RuntimeError):
    """A rank raised or died; the message names it and carries its traceback."""

    def __init__(self, message: str, ranks: Iterable[int] = ()) -> None:
        super().__init__(message)
        self.ranks = list(ranks)  # the ranks at fault


class LaunchTimeout(RankError):
    """Ranks were still running when the timeout ran out (``ranks`` lists them)."""


def _forkserver() -> ForkServerContext | SpawnContext:
    """The process-wide forkserver context. Usually already started in the background
    when threeaxes was imported in a kernel (``threeaxes.launch.prestart``); if that start is
    still under way, the first spawn waits on the forkserver's lock and uses that server."""
    return prestart.forkserver_context()


class LocalLaunch:
    """One call of launch: spawn the ranks, wait for them, always tear down."""

    def __init__(self, world_size: int, backend: str, timeout: float, payload: bytes) -> None:
        self.world_size, self.backend, self.timeout, self.payload = world_size, backend, timeout, payload
        self.procs: dict[int, BaseProcess] = {}  # rank -> Process
        self.conns: dict[int, Connection] = {}  # rank -> the caller's end of that rank's pipe
        self.started: set[int] = set()
        self.results: dict[int, Any] = {}  # rank -> what fn returned there
        self.stacks: dict[int, str] = {}  # rank -> where its main thread was when asked

    def run(self) -> list[Any]:
        ctx = _forkserver()
        # Rendezvous: the store lives here, in the caller; port 0 lets the OS choose.
        store = dist.TCPStore(
            "127.0.0.1", 0, is_master=True, wait_for_workers=False,
            timeout=datetime.timedelta(seconds=self._rank_timeout_s()),
        )
        succeeded = False
        try:
            self._spawn(ctx, store.port)
            self._wait()
            succeeded = True
        finally:
            self._stop(graceful=succeeded)
        return [self.results[rank] for rank in range(self.world_size)]

    def _rank_timeout_s(self) -> float:
        # Longer than the caller's own limits, so the caller (with the better message)
        # always gives up first and a rank never times out on its own.
        return self.timeout + STARTUP_TIMEOUT_S + 30.0

    def _spawn(self, ctx: ForkServerContext | SpawnContext, port: int) -> None:
        """Spawn: one process per rank, forked from the warm forkserver."""
        for rank in range(self.world_size):
            ours, theirs = ctx.Pipe(duplex=True)
            self.conns[rank] = ours
            try:
                proc = ctx.Process(
                    target=worker.run_rank,
                    args=(rank, self.world_size, self.backend, port, self._rank_timeout_s(),
                          self.payload, theirs, dict(os.environ)),
                    name=f"threeaxes-rank-{rank}",
                    daemon=True,
                )
                proc.start()
                self.procs[rank] = proc
            finally:
                theirs.close()  # now only the rank holds it: its exit reads as end of file here

    def _wait(self) -> None:
        """Wait loop: relay output, collect results, raise on the first error or the deadline."""
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        all_started = False
        open_conns = {conn: rank for rank, conn in self.conns.items()}
        while len(self.results) < self.world_size:
            left = deadline - time.monotonic()
            if left <= 0:
                self._timed_out(all_started)
            # Wake up at least every _POLL_S: a SIGINT ("interrupt kernel") may be delivered
            # to one of torch's store threads, and then only the main thread's next return
            # to Python raises KeyboardInterrupt; a long wait would delay it by minutes.
            for conn in _ready(open_conns, timeout=min(left, _POLL_S)):
                rank = open_conns[conn]
                try:
                    message = conn.recv()
                except EOFError:  # the rank's process has exited
                    del open_conns[conn]
                    if rank not in self.results:
                        self._drain_output()
                        raise self._died(rank) from None
                    continue
                self._handle(rank, message)
            if not all_started and len(self.started) == self.world_size:
                all_started, deadline = True, time.monotonic() + self.timeout

    def _handle(self, rank: int, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "out":
            stream = sys.stdout if message[1] == "stdout" else sys.stderr
            stream.write("".join(f"[rank {rank}] {line}\n" for line in message[2]))
            stream.flush()
        elif kind == "started":
            self.started.add(rank)
        elif kind == "ok":
            try:
                self.results[rank] = pickle.loads(message[1])
            except Exception as exc:
                raise RankError(f"the result of rank {rank} could not be unpickled here: {exc}", [rank]) from exc
        elif kind == "err":
            self._drain_output()
            raise RankError(f"rank {rank} of {self.world_size} raised:\n\n{_with_source(message[1])}", [rank])
        elif kind == "stack":
            self.stacks[rank] = message[1]

    def _drain_output(self) -> None:
        """Before raising, print what the other ranks had already sent: it often explains the error."""
        give_up = time.monotonic() + _STACK_WAIT_S
        for rank, conn in self.conns.items():
            try:
                while time.monotonic() < give_up and conn.poll():
                    message = conn.recv()
                    if message[0] == "out":
                        self._handle(rank, message)
            except (EOFError, OSError):
                pass

    def _died(self, rank: int) -> RankError:
        proc = self.procs[rank]
        proc.join(1.0)
        code = proc.exitcode
        how = f"was killed by signal {-code}" if code is not None and code < 0 else f"exited with code {code}"
        hint = " (signal 9 often means the machine ran out of memory)" if code == -9 else ""
        if code == 1 and getattr(sys.modules["__main__"], "__file__", None):
            # each rank imports the script as a module first: unguarded launch() runs again there
            hint = "; in a script, call launch() under `if __name__ == \"__main__\":`"
        return RankError(f"rank {rank} of {self.world_size} {how} before returning a result{hint}", [rank])

    def _timed_out(self, all_started: bool) -> NoReturn:
        """Name the ranks that did not finish, show where they wait, and say what to change."""
        stuck = [r for r in range(self.world_size) if r not in self.results]
        self._ask_where(stuck)
        if all_started:
            done = [r for r in range(self.world_size) if r in self.results]
            text = (
                f"launch timed out: rank(s) {stuck} of {self.world_size} were still running after "
                f"timeout={self.timeout:g} s" + (f", while rank(s) {done} had finished" if done else "") + ".\n"
                "---> HINT: ranks that wait forever usually disagree about collectives: one rank "
                "skipped or added an all_reduce / broadcast / barrier / send / recv, so its partners "
                "wait for it. Make every rank call the same collectives in the same order. If the "
                "work is just slow, raise the limit: launch(..., timeout=600)."
            )
        else:
            waiting = [r for r in range(self.world_size) if r not in self.started]
            text = (
                f"launch timed out: rank(s) {waiting} of {self.world_size} did not start within "
                f"{STARTUP_TIMEOUT_S:g} s (starting the process and joining the process group).\n"
                "---> HINT: the machine may be overloaded, or the backend cannot connect; "
                "try fewer ranks or backend='gloo'."
            )
        for rank in sorted(self.stacks):
            text += f"\n\nrank {rank} was here:\n{_with_source(self.stacks[rank])}"
        raise LaunchTimeout(text, stuck)

    def _ask_where(self, ranks: Iterable[int]) -> None:
        """Ask each rank where its main thread is; give them a moment to answer."""
        asked = {self.conns[r]: r for r in ranks}
        for conn in asked:
            try:
                conn.send("stack")
            except OSError:
                pass
        give_up = time.monotonic() + _STACK_WAIT_S
        while asked and time.monotonic() < give_up:
            for conn in _ready(asked, timeout=give_up - time.monotonic()):
                try:
                    message = conn.recv()
                except EOFError:
                    message = ("stack", None)
                if message[0] == "out":
                    self._handle(asked[conn], message)
                elif message[0] == "stack":
                    if message[1]:
                        self.stacks[asked[conn]] = message[1]
                    del asked[conn]

    def _stop(self, graceful: bool) -> None:
        """Teardown: no rank outlives the call. After success, ranks get a moment to
        leave the group cleanly; otherwise (or if they linger, or that wait is
        interrupted) close their pipes, terminate, then kill."""
        procs = list(self.procs.values())
        try:
            if graceful:
                _join_all(procs, _EXIT_GRACE_S)
        finally:
            for conn in self.conns.values():
                conn.close()  # each rank's watchdog sees end of file and exits, even one we never saw start
            for proc in procs:
                if proc.is_alive():
                    proc.terminate()
            _join_all(procs, 1.0)
            for proc in procs:
                if proc.is_alive():
                    proc.kill()
            _join_all(procs, None)
            for proc in procs:
                proc.close()


def _ready(conns: Iterable[Connection], timeout: float) -> list[Connection]:
    """The pipes among `conns` with a message or end of file waiting, after at most `timeout` s."""
    # wait() returns some of the objects it was given, here only Connections; typeshed
    # types its result as every kind it accepts (Connection | socket | int).
    return cast("list[Connection]", multiprocessing.connection.wait(list(conns), timeout=timeout))


def _join_all(procs: Iterable[BaseProcess], seconds: float | None) -> None:
    deadline = None if seconds is None else time.monotonic() + seconds
    for proc in procs:
        proc.join(None if deadline is None else max(0.0, deadline - time.monotonic()))


_FRAME_LINE = re.compile(r'^\s*File "(?P<file>.+)", line (?P<line>\d+), in ')


def _with_source(text: str) -> str:
    """Put back the source lines a rank could not show: notebook cells exist only in
    this (the kernel's) linecache, not in the worker processes'."""
    lines, out = text.splitlines(), []
    for i, line in enumerate(lines):
        out.append(line)
        match = _FRAME_LINE.match(line)
        has_source = i + 1 < len(lines) and not _FRAME_LINE.match(lines[i + 1]) and lines[i + 1].startswith("    ")
        if match and not has_source:
            source = linecache.getline(match["file"], int(match["line"])).strip()
            if source:
                out.append(" " * (line.index("File") + 2) + source)
    return "\n".join(out)
