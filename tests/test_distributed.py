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
def test_two_workers_train_mlp_every_dump_applied_once_and_pushed_every_n_sync(tmp_path):
    n_sync = 4
    run, s = _mpirun(3, ["mlp", "--epochs", "3", "--eval-every", "1", "--n-sync", str(n_sync)], tmp_path,
                     env={"AMP_HLS_DUPLICATE_EVERY": "5"})
    assert run.returncode == 0, run.stderr[-3000:]
    assert s["workers"] == 2 and s["dropped_workers"] == []
    assert s["test_accuracy"] >= 0.85
    assert sum(int(v) for v in s["worker_instances"].values()) > 0
    counts = s["worker_dumps"]
    for rank, c in counts.items():
        # what the worker sent (its BYE) against what the server made of it, exactly: each
        # distinct dump applied once (or received late, after its STOP), each resend ignored
        assert c["resent"] > 0 and c["duplicates"] == c["resent"], (rank, c)
        assert c["applied"] + c["late"] == c["dumps_sent"], (rank, c)
        # a push after every n_sync applied dumps (and the first); each one sent, or merged into
        # the one still waiting, or waiting at the stop; every one sent received
        assert c["pushes_due"] == 1 + c["applied"] // n_sync, (rank, c)
        assert c["pushes_sent"] + c["pushes_merged"] + c["push_pending"] == c["pushes_due"], (rank, c)
        assert c["weights_received"] == c["pushes_sent"] >= 1, (rank, c)
    assert s["updates"] == sum(c["applied"] for c in counts.values())
    assert s["duplicates_ignored"] == sum(c["resent"] for c in counts.values())


@pytest.mark.mpi
def test_one_worker_with_local_updates_is_never_stale(tmp_path):
    # the worker re-applies its own updates the server has not confirmed on every install, so
    # with one worker each dump is computed on weights holding every earlier update
    run, s = _mpirun(2, ["mlp", "--epochs", "1", "--eval-every", "1", "--n-sync", "3"], tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert s["updates"] > 0 and s["staleness"]["max"] == 0
    assert s["test_accuracy"] >= 0.8


@pytest.mark.mpi
def test_server_checkpoint_resumes_and_warm_start_loads(tmp_path):
    ckpt = tmp_path / "server.npz"
    run, first = _mpirun(2, ["mlp", "--epochs", "1", "--eval-every", "1", "--checkpoint", str(ckpt)], tmp_path)
    assert run.returncode == 0 and ckpt.exists()
    _resumed_server_state_is_the_saved_one(ckpt)
    _poisoned_server_checkpoints_are_refused(ckpt, tmp_path)
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


def _resumed_server_state_is_the_saved_one(ckpt: Path) -> None:
    """A server resumed from ``ckpt`` (in this process, on MPI's self communicator) holds exactly
    the checkpoint: parameters, Adam moments and step counts, versions and history, bit for bit."""
    from mpi4py import MPI

    from amp_hls.checkpoint import read_checkpoint
    from amp_hls.distributed.server import ParameterServerRank
    from amp_hls.models import MODELS
    from amp_hls.runtime.trainer import TrainConfig

    arrays, meta = read_checkpoint(ckpt)
    server = ParameterServerRank(MPI.COMM_SELF, MODELS["mlp"], TrainConfig(), 1, resume=ckpt)
    params = {f"param/{n}/{t}": v for n, ts in server.params.items() for t, v in ts.items()}
    state = server.optimizer.state_arrays()
    assert set(params) | set(state) == set(arrays) and state
    for name, value in {**params, **state}.items():
        assert value.dtype == arrays[name].dtype and value.tobytes() == arrays[name].tobytes(), name
    assert server.optimizer.steps == meta["optimizer_steps"] and min(meta["optimizer_steps"].values()) > 0
    assert server.node_versions == meta["node_versions"] and server.version == meta["updates"] > 0
    assert json.dumps([vars(r) for r in server.history]) == json.dumps(meta["history"])  # NaN as NaN


def _poisoned_server_checkpoints_are_refused(ckpt: Path, tmp_path: Path) -> None:
    """Resuming a server from a damaged copy of ``ckpt`` is one AmpHlsError naming the entry."""
    from mpi4py import MPI

    from amp_hls.checkpoint import read_checkpoint
    from amp_hls.distributed.server import ParameterServerRank
    from amp_hls.errors import AmpHlsError
    from amp_hls.models import MODELS
    from amp_hls.runtime.trainer import TrainConfig

    arrays, meta = read_checkpoint(ckpt)
    first = sorted(n for n in arrays if n.startswith("param/"))[0]
    node = next(iter(meta["node_versions"]))
    poisons = {
        "holds NaN or inf": lambda a, m: a.__setitem__(first, a[first] * np.nan),
        "'optimizer_steps'": lambda a, m: m["optimizer_steps"].__setitem__(node, -1),
        "add up to": lambda a, m: m["node_versions"].__setitem__(node, m["node_versions"][node] + 1),
        "has shape": lambda a, m: a.__setitem__(first, a[first][:-1]),
        "not a server checkpoint": lambda a, m: m.__setitem__("version", 3),
    }
    for message, poison in poisons.items():
        a, m = {k: v.copy() for k, v in arrays.items()}, json.loads(json.dumps(meta))
        poison(a, m)
        path = tmp_path / "poisoned.npz"
        np.savez(path, **a, meta=np.array(json.dumps(m)))
        with pytest.raises(AmpHlsError, match=f"checkpoint {path}") as info:
            ParameterServerRank(MPI.COMM_SELF, MODELS["mlp"], TrainConfig(), 1, resume=path)
        assert message in str(info.value), str(info.value)
