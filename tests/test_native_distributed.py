"""``--distributed --backend native``: the workers train their shards on the native runtime
(under a real mpiexec; the server is the usual one)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mpi4py")
MPIEXEC = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
pytestmark = [pytest.mark.skipif(MPIEXEC is None, reason="needs mpiexec (the mpi extra)"), pytest.mark.mpi,
              pytest.mark.gxx]


def test_two_native_workers_train_mlp(tmp_path: Path) -> None:
    cache = tmp_path / "native-cache"  # empty: the workers build the native runtime themselves
    out = tmp_path / "summary.json"
    # three epochs: native workers outrun the numpy server, so their dumps are staler (mean 4-10
    # versions against numpy workers' 2) and one epoch ends anywhere in 0.68-0.84 (the CI run
    # that failed: 0.79); three ended in 0.88-0.92 over four runs here
    cmd = [str(MPIEXEC), "-disable-auto-cleanup", "-n", "3", sys.executable, "-m", "amp_hls.cli", "train", "mlp",
           "--epochs", "3", "--eval-every", "1", "--worker-timeout", "120", "--backend", "native", "--distributed",
           "--quiet", "--json", str(out)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path,
                         env={**os.environ, "AMP_HLS_NATIVE_CACHE": str(cache)})
    assert run.returncode == 0, run.stderr[-3000:]
    s = json.loads(out.read_text())
    assert s["workers"] == 2 and s["updates"] > 0 and not s["dropped_workers"]
    assert s["test_accuracy"] >= 0.8
    assert list(cache.glob("libamp_native_*.so")), "no worker built the native runtime"
