"""Bad input is one line and exit 2, never a traceback (amp_hls.cli.run_command); SIGINT is one
line saying what the checkpoint holds; messages escape the control characters they quote."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from amp_hls.cli import main
from amp_hls.datasets import qm9
from amp_hls.errors import IRError, escape_controls
from amp_hls.ir import LIMITS, loads
from amp_hls.models import MODELS
from amp_hls.runtime.trainer import Trainer
from tests.helpers import interruptible

AMP = [sys.executable, "-m", "amp_hls.cli"]


def _one_line_error(capsys, argv, *parts):
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("amp-hls: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for part in parts:
        assert part in err, err
    return err


def _doc(nodes, edges=()):
    return {"schema": "amp-hls.graph", "version": 1, "name": "g", "nodes": nodes, "edges": list(edges)}


def test_graph_files_that_cannot_be_read(tmp_path, capsys):
    (tmp_path / "latin1.json").write_bytes(json.dumps(_doc([])).encode() + b"\xff\xfe")
    _one_line_error(capsys, ["summary", str(tmp_path / "latin1.json")], "is not UTF-8 text", "latin1.json")
    (tmp_path / "dir.json").mkdir()
    _one_line_error(capsys, ["summary", str(tmp_path / "dir.json")], "cannot read the graph file", "Is a directory")
    big = json.dumps(_doc([{"name": "x", "kind": "source", "attrs": {"width": 1}}])).replace('"width": 1', '"width": ' + "7" * 5000)
    (tmp_path / "big.json").write_text(big)
    _one_line_error(capsys, ["summary", str(tmp_path / "big.json")], "not valid JSON")


def test_the_node_limit_comes_before_any_quadratic_work():
    nodes = [{"name": f"x{i}", "kind": "source", "attrs": {"width": 1}} for i in range(40_000)]
    start = time.perf_counter()
    with pytest.raises(IRError, match=f"has 40000 nodes, beyond {LIMITS.max_nodes}"):
        loads(json.dumps(_doc(nodes)))
    assert time.perf_counter() - start < 2.0  # the JSON parse; no node was added


def test_control_characters_in_messages_are_escaped(tmp_path, capsys):
    name = "a\x1b[31mRED\x07\r"
    (tmp_path / "esc.json").write_text(json.dumps(_doc([{"name": name, "kind": "source", "attrs": {"width": 2}}])))
    err = _one_line_error(capsys, ["summary", str(tmp_path / "esc.json")], r"a\x1b[31mRED\x07\r")
    assert "\x1b" not in err and "\x07" not in err and "\r" not in err
    assert escape_controls("tab\tand\nnewline stay; \x00 \x9b go") == "tab\tand\nnewline stay; \\x00 \\x9b go"


def test_a_negative_seed_is_refused(capsys):
    _one_line_error(capsys, ["train", "mlp", "--seed", "-1", "--epochs", "1", "--quiet"],
                    "seed must be a non-negative integer, got -1")


@pytest.mark.parametrize("damage", ["not json {", "\udcff", '{"schema": "amp-hls.manifest", "numerics": 3}',
                                    '["a list"]'])
@pytest.mark.parametrize("command", ["csim", "report", "testbench", "estimate"])
def test_a_corrupt_manifest_is_one_line(tmp_path, capsys, damage, command):
    out = tmp_path / "p"
    assert main(["generate", "mlp", "-o", str(out)]) == 0
    capsys.readouterr()
    (out / "manifest.json").write_bytes(damage.encode("utf-8", "surrogateescape"))
    argv = [command, str(out)] + (["--no-measure"] if command == "report" else [])
    _one_line_error(capsys, argv, str(out))


@pytest.mark.parametrize("damage", ["missing", "header", "row", "bytes"])
def test_a_broken_qm9_data_folder_is_one_line(tmp_path, capsys, monkeypatch, damage):
    pytest.importorskip("rdkit")
    good = qm9._data_dir()
    for part in qm9.PARTS:  # a copy of the real folder, then broken as a bad install would be
        lines = (good / part).read_bytes().splitlines(keepends=True)[:50]
        (tmp_path / part).write_bytes(b"".join(lines))
    part = tmp_path / qm9.PARTS[1]
    if damage == "missing":
        part.unlink()
    elif damage == "header":
        part.write_text("Index,Nothing\n1,2\n")
    elif damage == "row":
        part.write_bytes(part.read_bytes() + b"12,C,not-a-number\n")
    else:
        part.write_bytes(part.read_bytes()[:200] + b"\xff\xfe\xfd" + part.read_bytes()[200:])
    monkeypatch.setattr(qm9, "_data_dir", lambda: tmp_path)
    qm9.read_qm9_table.cache_clear()
    try:
        _one_line_error(capsys, ["train", "ggsnn-qm9", "--epochs", "1", "--quiet"], qm9.PARTS[1])
    finally:
        qm9.read_qm9_table.cache_clear()


def test_sigint_says_what_the_checkpoint_holds_and_leaves_it_whole(tmp_path):
    ckpt = tmp_path / "run.npz"
    # epochs enough to be training still when the interrupt comes (200 took 16 s: a loaded machine
    # read the second epoch line after the run had ended)
    proc = subprocess.Popen([*AMP, "train", "mlp", "--epochs", "100000", "--no-target", "--quiet", "--checkpoint",
                             str(ckpt)], stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            preexec_fn=interruptible)
    assert proc.stderr is not None
    epochs = 0
    for line in proc.stderr:  # "epoch N: ..." after each epoch (and its checkpoint)
        epochs += line.startswith("epoch ")
        if epochs == 2:
            break
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=60)
    assert proc.returncode == 130, rest
    last = rest.strip().splitlines()[-1]
    assert last.startswith(f"amp-hls: interrupted; {ckpt} holds epoch ") and "--resume" in last, rest
    assert "Traceback" not in rest
    held = int(last.split(" holds epoch ")[1].split(":")[0])
    assert held >= 1  # the epoch of the last checkpoint written, whichever the interrupt came after
    trainer = Trainer.resume(MODELS["mlp"], ckpt)  # whole, and what the message says
    assert trainer.epoch == held
    assert sorted(os.listdir(tmp_path)) == ["run.npz"]  # no temporary file left
    assert np.isfinite(trainer.history[-1].val_metric)
