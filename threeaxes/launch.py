"""Run one function on N ranks from a notebook cell.

    results = launch(fn, 4, x)   # fn(rank, 4, x) on ranks 0..3; the results in rank order

How it works, phase by phase:

* Rendezvous. The caller opens a TCPStore on port 0, so the OS picks a free port and
  parallel launches never collide; each rank joins the default process group through
  it (gloo on CPU, NCCL with one GPU per rank).
* Spawn. Ranks fork from a multiprocessing forkserver that has imported torch once,
  so a warm launch takes a tenth of a second instead of seconds. fn and its arguments
  are pickled by value (cloudpickle): notebook functions, closures and lambdas work.
* Wait loop. Each rank has a pipe to the caller. What a rank prints comes back over
  it line by line and is printed here as ``[rank r] ...`` (in Jupyter only the
  kernel's own output reaches the cell), then its result, or its traceback, which is
  raised here at once as RankError.
* Teardown. Whatever happened (success, error, timeout, interrupt) every rank is
  stopped before launch returns; a rank whose caller dies exits on its own, because
  its pipe to the caller closes.

Under torchrun (RANK and WORLD_SIZE set) nothing is spawned: fn runs in this process
on the real group, and every rank's result is gathered to every rank.
"""

from __future__ import annotations

import datetime
import linecache
import math
import multiprocessing
import multiprocessing.connection
import numbers
import os
import pickle
import re
import sys
import time

import cloudpickle
import torch
import torch.distributed as dist

from threeaxes import _launch_worker

__all__ = ["launch", "RankError", "LaunchTimeout", "MAX_WORLD_SIZE"]

MAX_WORLD_SIZE = 64
# Starting the processes and joining the group has its own limit; `timeout` counts
# from the moment fn is running on every rank.
STARTUP_TIMEOUT_S = 120.0
_EXIT_GRACE_S = 10.0  # finished ranks get this long to leave the group before being stopped
_STACK_WAIT_S = 1.0  # how long a timeout waits for stuck ranks to say where they are
# Imported once in the forkserver; never anything that initialises CUDA.
_PRELOAD = ["torch", "torch.distributed", "cloudpickle", "threeaxes._launch_worker"]


class RankError(RuntimeError):
    """A rank raised or died; the message names it and carries its traceback."""

    def __init__(self, message, ranks=()):
        super().__init__(message)
        self.ranks = list(ranks)  # the ranks at fault


class LaunchTimeout(RankError):
    """Ranks were still running when the timeout ran out (``ranks`` lists them)."""


def launch(fn, world_size, *args, timeout=60.0, backend=None, **kwargs):
    """Call ``fn(rank, world_size, *args, **kwargs)`` on ranks 0..world_size-1.

    Each rank runs in its own process with ``torch.distributed``'s default group
    initialised: gloo on CPU, or NCCL with ``torch.cuda.set_device(rank)`` when there is
    one GPU per rank (``backend=`` overrides). Returns the ranks' return values as a
    list in rank order. Arguments and results travel by pickle, so results must be
    picklable; tensors come back on the CPU (detached, if they were inside a graph).

    Everything a rank prints appears here, each line prefixed ``[rank r]``. An
    exception on any rank raises RankError at once and stops the others. ``timeout``
    is how many seconds fn may run once every rank has started; past it, LaunchTimeout
    (usually a rank skipped or added a collective). ``timeout`` and ``backend`` are
    launch's own keywords, not passed on to fn.

    Under torchrun, fn runs in this process on the real group instead, and the list
    holds every rank's result (gathered with all_gather_object).
    """
    _check_args(fn, world_size, timeout, backend)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return _launch_under_torchrun(fn, int(world_size), backend, args, kwargs)
    backend = _pick_backend(backend, int(world_size), torch.cuda.device_count())
    try:
        payload = cloudpickle.dumps((fn, args, kwargs))
    except Exception as exc:
        raise TypeError(
            f"launch could not pickle fn or its arguments ({exc}); they travel to the ranks "
            "by pickle: pass tensors, numbers and plain data, not open files, locks or generators"
        ) from exc
    return _Launch(int(world_size), backend, float(timeout), payload).run()


def _check_args(fn, world_size, timeout, backend):
    if not callable(fn):
        raise TypeError(f"fn must be a function fn(rank, world_size, ...), got {type(fn).__name__}")
    if (
        isinstance(world_size, bool)
        or not isinstance(world_size, numbers.Integral)
        or not 1 <= world_size <= MAX_WORLD_SIZE
    ):
        raise ValueError(
            f"world_size must be a whole number of ranks from 1 to {MAX_WORLD_SIZE}, "
            f"got {world_size!r}; for example launch(fn, 4)"
        )
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or not 0 < timeout < math.inf:
        raise ValueError(
            f"timeout must be a positive, finite number of seconds, got {timeout!r}; "
            "for example timeout=120 for slow work"
        )
    if backend not in (None, "gloo", "nccl"):
        raise ValueError(
            f"backend must be 'gloo' (CPU), 'nccl' (one GPU per rank) or None to choose "
            f"automatically, got {backend!r}"
        )


def _pick_backend(backend, ranks_here, gpus):
    """NCCL when every rank on this machine gets its own GPU, else gloo; `backend` overrides."""
    if backend is None:
        return "nccl" if gpus >= ranks_here and dist.is_nccl_available() else "gloo"
    if backend == "nccl":
        if not dist.is_nccl_available():
            raise ValueError("backend='nccl' but this PyTorch build has no NCCL; use backend='gloo'")
        if gpus < ranks_here:
            fix = f" or at most {gpus} ranks" if gpus else ""
            raise ValueError(
                f"backend='nccl' needs one GPU per rank: {ranks_here} ranks on this machine, "
                f"but it has {gpus} GPU(s); use backend='gloo'{fix}"
            )
    return backend


def _forkserver():
    """The process-wide forkserver context. Workers fork from a server that imported
    torch once; multiprocessing keeps it running between calls and stops it (and it
    stops itself) when this process exits."""
    if "forkserver" not in multiprocessing.get_all_start_methods():  # Windows: slower, still works
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)  # takes effect when the server starts; a no-op after
    return ctx


class _Launch:
    """One call of launch: spawn the ranks, wait for them, always tear down."""

    def __init__(self, world_size, backend, timeout, payload):
        self.world_size, self.backend, self.timeout, self.payload = world_size, backend, timeout, payload
        self.procs = {}  # rank -> Process
        self.conns = {}  # rank -> the caller's end of that rank's pipe
        self.started, self.results, self.stacks = set(), {}, {}

    def run(self):
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

    def _rank_timeout_s(self):
        # Longer than the caller's own limits, so the caller (with the better message)
        # always gives up first and a rank never times out on its own.
        return self.timeout + STARTUP_TIMEOUT_S + 30.0

    def _spawn(self, ctx, port):
        """Spawn: one process per rank, forked from the warm forkserver."""
        for rank in range(self.world_size):
            ours, theirs = ctx.Pipe(duplex=True)
            self.conns[rank] = ours
            try:
                proc = ctx.Process(
                    target=_launch_worker.run_rank,
                    args=(rank, self.world_size, self.backend, port, self._rank_timeout_s(), self.payload, theirs),
                    name=f"threeaxes-rank-{rank}",
                    daemon=True,
                )
                proc.start()
                self.procs[rank] = proc
            finally:
                theirs.close()  # now only the rank holds it: its exit reads as end of file here

    def _wait(self):
        """Wait loop: relay output, collect results, raise on the first error or the deadline."""
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        all_started = False
        open_conns = {conn: rank for rank, conn in self.conns.items()}
        while len(self.results) < self.world_size:
            left = deadline - time.monotonic()
            if left <= 0:
                self._timed_out(all_started)
            for conn in multiprocessing.connection.wait(list(open_conns), timeout=left):
                rank = open_conns[conn]
                try:
                    message = conn.recv()
                except EOFError:  # the rank's process has exited
                    del open_conns[conn]
                    if rank not in self.results:
                        raise self._died(rank) from None
                    continue
                self._handle(rank, message)
            if not all_started and len(self.started) == self.world_size:
                all_started, deadline = True, time.monotonic() + self.timeout

    def _handle(self, rank, message):
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
            raise RankError(f"rank {rank} of {self.world_size} raised:\n\n{_with_source(message[1])}", [rank])
        elif kind == "stack":
            self.stacks[rank] = message[1]

    def _died(self, rank):
        proc = self.procs[rank]
        proc.join(1.0)
        code = proc.exitcode
        how = f"was killed by signal {-code}" if code is not None and code < 0 else f"exited with code {code}"
        hint = " (signal 9 often means the machine ran out of memory)" if code == -9 else ""
        if code == 1 and getattr(sys.modules["__main__"], "__file__", None):
            # each rank imports the script as a module first: unguarded launch() runs again there
            hint = "; in a script, call launch() under `if __name__ == \"__main__\":`"
        return RankError(f"rank {rank} of {self.world_size} {how} before returning a result{hint}", [rank])

    def _timed_out(self, all_started):
        """Name the ranks that did not finish, show where they wait, and say what to change."""
        stuck = [r for r in range(self.world_size) if r not in self.results]
        for rank in stuck:  # ask each stuck rank where its main thread is
            try:
                self.conns[rank].send("stack")
            except OSError:
                pass
        give_up = time.monotonic() + _STACK_WAIT_S
        while len(self.stacks) < len(stuck) and time.monotonic() < give_up:
            for conn in multiprocessing.connection.wait(
                [self.conns[r] for r in stuck], timeout=give_up - time.monotonic()
            ):
                try:
                    message = conn.recv()
                except EOFError:
                    stuck.remove(next(r for r in stuck if self.conns[r] is conn))
                    continue
                if message[0] in ("out", "stack"):
                    self._handle(next(r for r in stuck if self.conns[r] is conn), message)
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

    def _stop(self, graceful):
        """Teardown: no rank outlives the call. After success, ranks get a moment to
        leave the group cleanly; otherwise (or if they linger) terminate, then kill."""
        procs = list(self.procs.values())
        if graceful:
            _join_all(procs, _EXIT_GRACE_S)
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        _join_all(procs, 1.0)
        for proc in procs:
            if proc.is_alive():
                proc.kill()
        _join_all(procs, None)
        for conn in self.conns.values():
            conn.close()  # a rank this loop never saw (interrupted mid-start) sees end of file and exits
        for proc in procs:
            proc.close()


def _join_all(procs, seconds):
    deadline = None if seconds is None else time.monotonic() + seconds
    for proc in procs:
        proc.join(None if deadline is None else max(0.0, deadline - time.monotonic()))


_FRAME_LINE = re.compile(r'^\s*File "(?P<file>.+)", line (?P<line>\d+), in ')


def _with_source(text):
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


def _launch_under_torchrun(fn, world_size, backend, args, kwargs):
    """torchrun already started one process per rank: run fn here, on the real group."""
    env_world_size = int(os.environ["WORLD_SIZE"])
    if world_size != env_world_size:
        raise ValueError(
            f"launch(fn, {world_size}) but torchrun started WORLD_SIZE={env_world_size} ranks; "
            f"pass world_size={env_world_size}, or change --nproc_per_node / --nnodes"
        )
    if not dist.is_initialized():
        ranks_here = int(os.environ.get("LOCAL_WORLD_SIZE", env_world_size))
        backend = _pick_backend(backend, ranks_here, torch.cuda.device_count())
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend)  # env:// rendezvous, set up by torchrun
    rank = dist.get_rank()
    result = fn(rank, world_size, *args, **kwargs)
    # communication: every rank gets every rank's (pickled, CPU-only) result
    blobs = [None] * world_size
    dist.all_gather_object(blobs, _launch_worker.dumps_result(result, rank))
    return [pickle.loads(blob) for blob in blobs]
