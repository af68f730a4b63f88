"""Distributed asynchronous SGD under a real mpiexec: a server rank and worker ranks."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from amp_hls.distributed.protocol import ParamLayout

pytest.importorskip("mpi4py")
MPIEXEC = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
pytestmark = pytest.mark.skipif(MPIEXEC is None, reason="needs mpiexec (the mpi extra)")
AMP = [sys.executable, "-m", "amp_hls.cli"]


def _mpirun(n: int, args: list[str], tmp_path: Path, env: dict[str, str] | None = None,
            timeout: float = 240) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / f"summary_{n}.json"
    # -disable-auto-cleanup: a rank that dies must not take the others down (fault tolerance)
    cmd = [MPIEXEC, "-disable-auto-cleanup", "-n", str(n), *AMP, "train", *args, "--distributed",
           "--quiet", "--json", str(out)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=tmp_path,
                         env={**os.environ, **(env or {})})
    assert out.exists(), f"no summary; stdout:\n{run.stdout}\nstderr:\n{run.stderr[-3000:]}"
    return run, json.loads(out.read_text())


def test_param_layout_round_trips():
    rng = np.random.default_rng(0)
    params = {"b": {"weight": rng.normal(size=(3, 2)), "bias": rng.normal(size=3)},
              "a": {"weight": rng.normal(size=(2, 4))}}
    layout = ParamLayout.of(params)
    vec = layout.flatten(params)
    assert vec.size == layout.size == 6 + 3 + 8
    back = layout.unflatten(vec)
    for n in params:
        for t in params[n]:
            np.testing.assert_array_equal(back[n][t], params[n][t])
    assert layout.nodes == ["a", "b"]
    np.testing.assert_array_equal(layout.flatten(params, "b"), vec[8:])


@pytest.mark.mpi
def test_two_workers_train_mlp_and_every_dump_is_applied_once(tmp_path):
    run, s = _mpirun(3, ["mlp", "--epochs", "3", "--eval-every", "1"], tmp_path,
                     env={"AMP_HLS_DUPLICATE_EVERY": "5"})
    assert run.returncode == 0, run.stderr[-3000:]
    assert s["workers"] == 2 and s["dropped_workers"] == []
    assert s["test_accuracy"] >= 0.85
    assert s["duplicates_ignored"] > 0  # resent dumps arrived and were not applied again
    assert sum(int(v) for v in s["worker_instances"].values()) > 0


@pytest.mark.mpi
def test_one_worker_with_local_updates_is_never_stale(tmp_path):
    # the worker re-applies its own updates the server has not confirmed on every install, so
    # with one worker each dump is computed on weights holding every earlier update
    run, s = _mpirun(2, ["mlp", "--epochs", "1", "--eval-every", "1", "--n-sync", "3"], tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert s["updates"] > 0 and s["staleness"]["max"] == 0
    assert s["test_accuracy"] >= 0.8


@pytest.mark.mpi
def test_a_dead_worker_is_dropped_and_training_completes(tmp_path):
    run, s = _mpirun(
        3, ["list-rnn", "--epochs", "2", "--eval-every", "2", "--worker-timeout", "3", "--no-target"],
        tmp_path, env={"AMP_HLS_FAIL_WORKER": "2:2"},
    )
    assert s["dropped_workers"] == [2]
    assert any("worker 2" in e and "dropped" in e for e in s["events"])
    assert "dropped" in run.stdout
    assert s["test_accuracy"] > 0.2  # the surviving worker kept training


@pytest.mark.mpi
def test_server_checkpoint_resumes_and_warm_start_loads(tmp_path):
    ckpt = tmp_path / "server.npz"
    run, first = _mpirun(2, ["mlp", "--epochs", "1", "--eval-every", "1", "--checkpoint", str(ckpt)], tmp_path)
    assert run.returncode == 0 and ckpt.exists()
    run, second = _mpirun(2, ["mlp", "--epochs", "1", "--eval-every", "1", "--resume", str(ckpt)], tmp_path)
    assert run.returncode == 0
    assert any("resumed from" in e for e in second["events"])
    assert second["updates"] > first["updates"]
    # a CPU trainer's checkpoint warm-starts every worker
    cpu_ckpt = tmp_path / "cpu.npz"
    subprocess.run([*AMP, "train", "mlp", "--epochs", "2", "--quiet", "--checkpoint", str(cpu_ckpt)],
                   check=True, capture_output=True, timeout=120, cwd=tmp_path)
    run, warm = _mpirun(3, ["mlp", "--epochs", "1", "--eval-every", "1", "--warm-start", str(cpu_ckpt)], tmp_path)
    assert run.returncode == 0
    assert any("warm start" in e for e in warm["events"])
    assert warm["history"][0]["val_metric"] > 0.8  # already trained before the first update


def test_the_jobs_mak_is_split_over_the_workers():
    from amp_hls.distributed import worker_mak

    assert [worker_mak(16, w) for w in (1, 2, 3, 4, 32)] == [16, 8, 6, 4, 1]
