"""Each rank of a distributed job runs as two processes: a keeper, which mpiexec starts, and the
rank itself, the keeper's child (docs/distributed.md, Failure model).

Why a keeper: MPICH's Hydra sends SIGKILL to every rank of the job as soon as one process it
started dies by a signal, with or without ``-disable-auto-cleanup`` (its proxy does so on any
``WIFSIGNALED`` child); it spares the others only when a process *exits*. The keeper turns
whatever ends its rank (a crash, SIGKILL, SIGTERM, the OOM killer) into an exit with a code, so
Hydra leaves the other ranks alone and the protocol's timeouts deal with the loss. The keeper
also ends a rank that has stopped making progress (hung, or stopped with SIGSTOP) once it has
been silent for longer than the rank promised, so no rank can keep the job alive forever.

The rank promises on its *lifeline*, a pipe to the keeper: each line is ``<seconds>`` (end me if
you hear nothing more within that long) or ``done <code>`` (I am finishing with ``code``; end me
with that code if I have not exited within ``FINISH_S``).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

from ..errors import AmpHlsError

LIFELINE_ENV = "AMP_HLS_LIFELINE_FD"  # set by the keeper: the rank's end of the lifeline

# Exit codes of a rank (and of the keeper that reports it), besides errors.EXIT_ERROR (1) and
# EXIT_BAD_INPUT (2). Hydra's mpiexec exits with the bitwise OR of every rank's code, so each is
# one bit and the job's code says what happened.
EXIT_WORKER_LOST = 4  # a worker was lost: the job finished without it
EXIT_SERVER_LOST = 8  # the server was lost: the workers left, there are no results

STARTUP_S = 900.0  # before its first promise: imports, the data set, MPI_Init (QM9 in full is slow)
FINISH_S = 30.0  # from "done" to the rank's exit: MPI_Finalize and the interpreter's exit
POLL_S = 0.1  # how often the keeper looks at its rank
BEAT_EVERY_S = 0.25  # a rank repeats an unchanged promise at most this often


def launcher_rank() -> int | None:
    """This process's rank as the MPI launcher numbers it (Hydra and PMIx set these), if any."""
    for name in ("PMI_RANK", "PMIX_RANK"):
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return None


def role(rank: int | None) -> str:
    if rank is None:
        return "this rank"
    return "rank 0 (the server)" if rank == 0 else f"rank {rank} (worker {rank})"


def lost_code(rank: int | None) -> int:
    """The exit code that says this rank was lost."""
    return EXIT_SERVER_LOST if rank == 0 else EXIT_WORKER_LOST


def ignore_failure_notices() -> None:
    """Hydra sends SIGUSR1 to every process of a host whenever one rank ends without
    MPI_Finalize (its fault notification; it does not say which rank). Its default action would
    kill the process, and a lost rank is the protocol's business, so both processes ignore it."""
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)


def keep_rank() -> int:
    """Run this same command line as the rank (a child with a lifeline) and return the code to
    exit with: the rank's own, or ``lost_code`` when it was killed or stopped making progress."""
    rank = launcher_rank()
    ignore_failure_notices()
    read_end, write_end = os.pipe()
    os.set_inheritable(write_end, True)
    # close_fds=False: the rank needs what the launcher handed this process (Hydra's PMI_FD)
    child = subprocess.Popen([sys.executable, *sys.orig_argv[1:]], close_fds=False,
                             env={**os.environ, LIFELINE_ENV: str(write_end)})
    os.close(write_end)
    # SIGINT reaches the rank directly (Hydra and a terminal signal the whole process group), so
    # the keeper only survives it; SIGTERM and SIGHUP sent to the keeper alone go on to the rank.
    handlers = {signal.SIGINT: signal.signal(signal.SIGINT, signal.SIG_IGN)}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        handlers[sig] = signal.signal(sig, lambda number, _frame: child.send_signal(number))
    try:
        return _watch(child, read_end, rank)
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        os.close(read_end)


def _watch(child: subprocess.Popen, lifeline: int, rank: int | None) -> int:
    deadline = time.monotonic() + STARTUP_S
    finishing: int | None = None  # the code the rank said it is finishing with
    pending = b""
    open_ = True
    while child.poll() is None:
        now = time.monotonic()
        if now > deadline:
            child.kill()
            child.wait()
            if finishing is not None:
                print(f"amp-hls: {role(rank)} did not exit within {FINISH_S:g} s of finishing "
                      "(MPI_Finalize waits for a lost peer): ended", file=sys.stderr, flush=True)
                return finishing
            print(f"amp-hls: {role(rank)} showed no progress for longer than it promised "
                  "(hung or stopped): killed", file=sys.stderr, flush=True)
            return lost_code(rank)
        wait = min(POLL_S, deadline - now)
        if not open_:
            time.sleep(wait)
            continue
        if not select.select([lifeline], [], [], wait)[0]:
            continue
        data = os.read(lifeline, 4096)
        if not data:
            open_ = False  # the rank closed its end: it is exiting
            continue
        *lines, pending = (pending + data).split(b"\n")
        for line in lines:
            words = line.split()
            if len(words) == 2 and words[0] == b"done":
                finishing, deadline = int(words[1]), time.monotonic() + FINISH_S
            elif finishing is None:
                deadline = time.monotonic() + float(words[0])
    code = child.returncode
    if code < 0:
        name = signal.Signals(-code).name
        print(f"amp-hls: {role(rank)} was killed by {name}", file=sys.stderr, flush=True)
        return lost_code(rank)
    return code


class Lifeline:
    """The rank's end of the lifeline: promises to its keeper."""

    def __init__(self, fd: int):
        self.fd = fd
        os.set_blocking(fd, False)
        self.promised = 0.0
        self.last = 0.0

    @classmethod
    def take(cls) -> Lifeline | None:
        """The lifeline the keeper handed this process (None: this process is a keeper), removed
        from the environment so that nothing this rank starts takes itself for a rank."""
        value = os.environ.pop(LIFELINE_ENV, None)
        if value is None:
            return None
        fd = int(value)
        os.set_inheritable(fd, False)
        return cls(fd)

    def beat(self, within_s: float) -> None:
        """Promise a next sign of life within ``within_s`` seconds (cheap: call it often)."""
        now = time.monotonic()
        if within_s == self.promised and now - self.last < BEAT_EVERY_S:
            return
        self._say(f"{within_s:.3f}\n")
        self.promised, self.last = within_s, now

    def finish(self, code: int) -> None:
        """Say that this rank is ending with ``code`` (what is left: MPI_Finalize, the exit)."""
        self._say(f"done {code}\n")

    def _say(self, line: str) -> None:
        try:
            os.write(self.fd, line.encode())
        except BlockingIOError:
            pass  # the pipe is full of earlier promises the keeper has yet to read
        except BrokenPipeError:
            raise AmpHlsError("this rank's keeper process is gone (was it killed?)") from None


def release_shared_memory() -> None:
    """Unlink the MPICH shared-memory segments this rank has mapped. MPI_Finalize would do it,
    but a rank that skips MPI_Finalize (its barrier would wait for a lost peer forever) leaves
    the segment in /dev/shm otherwise, about 3 MB a job; ranks still running keep their mapping."""
    try:
        with open("/proc/self/maps") as maps:
            fields = [line.split(maxsplit=5) for line in maps]
    except OSError:
        return  # no /proc to find them by
    paths = {f[5].strip() for f in fields if len(f) == 6 and f[5].startswith("/dev/shm/mpich_shm_")}
    for path in sorted(p for p in paths if not p.endswith("(deleted)")):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass  # another rank of the job removed it first
