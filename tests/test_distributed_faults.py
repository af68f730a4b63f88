"""Distributed jobs always end (docs/distributed.md, Failure model): a real mpiexec, real ranks,
real signals sent to the rank processes, and the surviving ranks running the user's own code.

Each job is found by an inert marker in its environment, which every process of it inherits, so
a test can signal one rank's process and check that nothing of the job outlives mpiexec.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path

import pytest

pytest.importorskip("mpi4py")
MPIEXEC = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
pytestmark = [pytest.mark.mpi, pytest.mark.alone,  # a 2 s worker timeout: no other test's load beside it
              pytest.mark.skipif(MPIEXEC is None, reason="needs mpiexec (the mpi extra)")]

from amp_hls.distributed.keeper import EXIT_SERVER_LOST, EXIT_WORKER_LOST  # noqa: E402
from amp_hls.errors import EXIT_BAD_INPUT, EXIT_ERROR  # noqa: E402
from tests.helpers import interruptible  # noqa: E402

MARKER = "AMP_HLS_TEST_JOB"
TIMEOUT = 2.0  # --worker-timeout of these jobs
JOB_LIMIT = 120.0  # no job here may take longer, whatever happens


def _processes() -> dict[int, dict[str, str]]:
    """Every process whose environment we can read: pid -> environment."""
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                raw = Path(f"/proc/{name}/environ").read_bytes()
            except OSError:
                continue
            out[int(name)] = dict(x.split("=", 1) for x in raw.decode(errors="replace").split("\0") if "=" in x)
    return out


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


class Job:
    """One ``mpiexec -disable-auto-cleanup -n N amp-hls train ... --distributed`` with its output
    read line by line (with arrival times) and its processes found by ``MARKER``."""

    def __init__(self, tmp_path: Path, args: list[str], n: int = 3, env: dict[str, str] | None = None):
        self.tag = uuid.uuid4().hex
        self.summary_path = tmp_path / "summary.json"
        cmd = [MPIEXEC, "-disable-auto-cleanup", "-n", str(n), sys.executable, "-m", "amp_hls.cli", "train",
               *args, "--distributed", "--quiet", "--worker-timeout", str(TIMEOUT),
               "--json", str(self.summary_path)]
        self.start = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
                                     env={**os.environ, **(env or {}), MARKER: self.tag},
                                     preexec_fn=interruptible)
        self.lines: list[tuple[float, str]] = []
        self.cond = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self.cond:
                self.lines.append((time.monotonic(), line))
                self.cond.notify_all()

    @property
    def output(self) -> str:
        with self.cond:
            return "".join(line for _, line in self.lines)

    def wait_for(self, pattern: str, timeout: float = 60.0) -> None:
        """Until a line of output matches ``pattern``."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while not any(re.search(pattern, line) for _, line in self.lines):
                left = deadline - time.monotonic()
                assert left > 0 and self.proc.poll() is None, f"no {pattern!r} in:\n{self.output}"
                self.cond.wait(min(left, 0.2))

    def when(self, pattern: str) -> float:
        """Seconds since the job started at which a line matching ``pattern`` arrived."""
        with self.cond:
            return next(t for t, line in self.lines if re.search(pattern, line)) - self.start

    def pids(self) -> dict[int, tuple[int, int]]:
        """rank -> (its keeper's pid, the rank process's pid)."""
        found = {pid: env for pid, env in _processes().items() if env.get(MARKER) == self.tag and "PMI_RANK" in env}
        by_rank: dict[int, dict[str, int]] = defaultdict(dict)
        for pid, env in found.items():
            by_rank[int(env["PMI_RANK"])]["rank" if _parent(pid) in found else "keeper"] = pid
        return {r: (p["keeper"], p["rank"]) for r, p in by_rank.items() if set(p) == {"keeper", "rank"}}

    def kill(self, rank: int, sig: signal.Signals) -> float:
        """Send ``sig`` to the process of ``rank`` (not its keeper); when, since the start."""
        pid = self.pids()[rank][1]
        os.kill(pid, sig)
        return time.monotonic() - self.start

    def finish(self) -> tuple[int, float, dict]:
        """(exit code, seconds since the start, the summary or {}), once mpiexec has exited; then
        no process of the job may be left."""
        try:
            code = self.proc.wait(timeout=JOB_LIMIT - (time.monotonic() - self.start))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            pytest.fail(f"the job did not end within {JOB_LIMIT} s:\n{self.output}")
        ended = time.monotonic() - self.start
        self.reader.join(timeout=5)
        left = [pid for pid, env in _processes().items() if env.get(MARKER) == self.tag]
        assert not left, f"processes of the job outlived mpiexec: {left}\n{self.output}"
        summary = json.loads(self.summary_path.read_text()) if self.summary_path.exists() else {}
        return code, ended, summary

    def close(self) -> None:
        """Leave nothing behind, whatever the test did."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for pid, env in _processes().items():
            if env.get(MARKER) == self.tag:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


@pytest.fixture
def job(tmp_path):
    jobs: list[Job] = []

    def start(args: list[str], **kwargs) -> Job:
        jobs.append(Job(tmp_path, args, **kwargs))
        return jobs[-1]

    yield start
    for j in jobs:
        j.close()


# mlp trains ~2 s with 2 workers on 2 cores: long enough to lose a rank in the middle of it
TRAIN = ["mlp", "--epochs", "25", "--no-target", "--eval-every", "0.5"]
SIGNAL_NAMES = lambda sig: sig.name  # noqa: E731  (test ids)
FIRST_VALIDATION = r"\[server\] t="


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGSTOP], ids=SIGNAL_NAMES)
def test_a_killed_or_stopped_worker_is_dropped_and_the_job_ends(job, sig):
    j = job(TRAIN)
    j.wait_for(FIRST_VALIDATION)
    killed = j.kill(2, sig)
    code, ended, s = j.finish()
    out = j.output
    assert code == EXIT_WORKER_LOST, out  # the OR of every rank's code: only "a worker was lost"
    assert s["dropped_workers"] == [2], out
    (lost,) = s["lost_workers"]
    assert lost["rank"] == 2 and lost["at_s"] > 0 and lost["why"], lost
    assert f"worker 2 lost at t={lost['at_s']:.1f}s" in out
    # the survivor trained on after the loss, and the server validated what it did
    assert any(r["wall_s"] > lost["at_s"] for r in s["history"]), s["history"]
    assert s["worker_dumps"]["1"]["applied"] > 0 and s["test_accuracy"] > 0.8
    # the keeper of the lost rank says what happened to it
    if sig is signal.SIGSTOP:
        assert "rank 2 (worker 2) showed no progress for longer than it promised (hung or stopped): killed" in out
    else:
        assert f"rank 2 (worker 2) was killed by {sig.name}" in out
    assert "Traceback" not in out
    # the server notices within its timeout (a SIGKILL mid-transfer at once), and the job then
    # ends with the training: the one survivor finishes the epochs it has left
    assert j.when("worker 2 lost") - killed < TIMEOUT + 2.0, out
    assert ended - killed < TIMEOUT + 15.0  # no survivor waits in MPI_Finalize (30 s, then its keeper)


def test_a_worker_that_raises_is_dropped_and_the_job_ends(job):
    # the fault variable makes worker 2's own code raise (its keeper and the others are untouched)
    j = job(TRAIN, env={"AMP_HLS_FAIL_WORKER": "2:0.5"})
    code, _, s = j.finish()
    out = j.output
    assert code == EXIT_ERROR | EXIT_WORKER_LOST, out  # its traceback (1), then the loss (4)
    assert s["dropped_workers"] == [2] and "silent for" in s["lost_workers"][0]["why"]
    assert out.count("Traceback") == 1 and "RuntimeError: worker 2: injected fault" in out
    assert s["worker_dumps"]["1"]["applied"] > 0


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP], ids=SIGNAL_NAMES)
def test_when_the_server_is_lost_every_worker_leaves(job, sig):
    j = job(TRAIN)
    j.wait_for(FIRST_VALIDATION)
    killed = j.kill(0, sig)
    code, ended, s = j.finish()
    out = j.output
    assert code == EXIT_SERVER_LOST, out
    assert s == {} or s["updates"] >= 0  # a summary only from before the loss: none is written after
    for worker in (1, 2):
        assert re.search(rf"worker {worker}: (no word from the server \(rank 0\) for [0-9.]+ s: it is lost;"
                         rf"|the server \(rank 0\) is unreachable \(.+\):) leaving", out), out
    what = "was killed by SIGKILL" if sig is signal.SIGKILL else "showed no progress for longer than it promised"
    assert f"rank 0 (the server) {what}" in out
    assert "Traceback" not in out
    assert ended - killed < TIMEOUT + 5.0, out  # the workers' timeout, then they are gone


def test_a_bad_resume_or_warm_start_file_is_one_message(job, tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"PK\x03\x04 not a zip archive")
    for option in ("--resume", "--warm-start"):
        j = job(["mlp", "--epochs", "1", option, str(bad)])
        code, ended, s = j.finish()
        out = j.output
        assert code == EXIT_BAD_INPUT, out
        assert out.count("amp-hls: error:") == 1 and str(bad) in out, out
        assert "Traceback" not in out and s == {}
        assert ended < 30.0  # the workers did not wait for a server that had already said why


def test_sigint_ends_the_job_with_one_line_saying_what_the_checkpoint_holds(job, tmp_path):
    from amp_hls.checkpoint import read_checkpoint
    from amp_hls.errors import EXIT_INTERRUPTED

    ckpt = tmp_path / "server.npz"
    j = job([*TRAIN, "--checkpoint", str(ckpt)])
    j.wait_for(FIRST_VALIDATION)
    j.proc.send_signal(signal.SIGINT)  # Ctrl-C at mpiexec: Hydra sends it to every rank
    code, _, _ = j.finish()
    out = j.output
    assert code == EXIT_INTERRUPTED, out
    (line,) = [x for x in out.splitlines() if x.startswith("amp-hls: interrupted")]
    match = re.fullmatch(rf"amp-hls: interrupted; {re.escape(str(ckpt))} holds the server at (\d+) updates \(t=[0-9.]+s\)", line)
    assert match, line
    assert read_checkpoint(ckpt)[1]["updates"] == int(match.group(1)) > 0  # whole, and as it says
    assert "Traceback" not in out


def test_a_worker_done_early_waits_for_a_slow_one(job):
    # worker 2 is slowed down by stopping it for 1.2 s at a time (under the timeout, so it is never
    # dropped) from the first validation on, when both train; worker 1 finishes long before it and
    # must wait, told by ALIVE that the server is still there, for the FINAL that lets everyone
    # finalize. Each worker's share takes about 2 s at full pace, so worker 2 has most of it left
    # when the stopping starts (12 epochs and a first validation at 0.5 s left it a few tenths of a
    # second, and on a loaded machine it finished within the timeout of worker 1).
    j = job(["mlp", "--epochs", "24", "--no-target", "--eval-every", "0.25"])
    j.wait_for(FIRST_VALIDATION)
    pid = j.pids()[2][1]
    while j.proc.poll() is None and not re.search(r"worker 2 done", j.output):
        assert time.monotonic() - j.start < JOB_LIMIT, f"worker 2 not done within {JOB_LIMIT} s:\n{j.output}"
        try:
            os.kill(pid, signal.SIGSTOP)
            time.sleep(1.2)
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    code, _, s = j.finish()
    assert j.when("worker 2 done") - j.when("worker 1 done") > TIMEOUT, j.output  # a wait past a timeout
    assert code == 0, j.output
    assert s["dropped_workers"] == [] and s["lost_workers"] == []
    assert "leaving" not in j.output
