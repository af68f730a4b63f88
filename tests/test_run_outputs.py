"""What a run gives back and how it stops: a NaN/inf stops it naming the node; flags a mode
ignores, and new settings on --resume, are errors; extras are checked before work starts; the
per-epoch log, TensorBoard events and the plot; --version, a closed pipe, the packaging files."""

from __future__ import annotations

import csv
import io
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

import amp_hls
from amp_hls import api
from amp_hls.cli import EXIT_BROKEN_PIPE, console, main
from amp_hls.datasets import Splits
from amp_hls.errors import AmpHlsError, NonFiniteError
from amp_hls.models import MODELS
from amp_hls.runtime import OptimizerConfig, TrainConfig, Trainer
from amp_hls.runtime.optim import Optimizer
from amp_hls.runtime.report import EpochLog, tensorboard_available
from amp_hls.runtime.trainer import EpochRecord

ROOT = Path(__file__).resolve().parents[1]


def _small_mlp():
    full = MODELS["mlp"].splits(0)
    return Splits(full.name, full.train[:200], full.val[:50], full.test[:50])


# --- NaN and inf --------------------------------------------------------------------------------


def test_a_diverging_run_exits_nonzero_naming_the_node(capsys):
    assert main(["train", "mlp", "--lr", "1e300", "--epochs", "2", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "amp-hls: error: node 'head': update 1 made its weight NaN or inf (learning rate 1e+300)" in err
    assert "epoch 1:" not in err  # it stopped inside the first epoch


def test_the_device_trainer_stops_too(capsys):
    assert main(["train", "mlp", "--backend", "numpy-device", "--numerics", "fixed", "--lr", "1e300",
                 "--epochs", "1", "--quiet"]) == 2
    assert "node 'head': update 1 made its weight NaN or inf" in capsys.readouterr().err


@pytest.mark.mpi
def test_a_diverging_distributed_run_stops_too(tmp_path):
    pytest.importorskip("mpi4py")
    import shutil
    import subprocess

    mpiexec = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
    if mpiexec is None:
        pytest.skip("needs mpiexec (the mpi extra)")
    done = subprocess.run([mpiexec, "-disable-auto-cleanup", "-n", "2", sys.executable, "-m", "amp_hls.cli", "train",
                           "mlp", "--distributed", "--lr", "1e300", "--epochs", "1", "--eval-every", "1"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2
    assert "node 'head': update 1 made its weight NaN or inf" in done.stderr


def test_a_nan_gradient_or_loss_names_its_node():
    opt = Optimizer(OptimizerConfig("sgd", lr=0.1))
    with pytest.raises(NonFiniteError, match=r"node 'fc0': its weight gradient holds NaN or inf at update 1") as err:
        opt.step("fc0", {"weight": np.zeros(2)}, {"weight": np.array([1.0, np.inf])})
    assert err.value.node == "fc0"
    trainer = Trainer(MODELS["mlp"], TrainConfig(epochs=1), _small_mlp())
    trainer.engine.kernels["head"].params["bias"][:] = np.nan  # a poisoned prediction
    with pytest.raises(NonFiniteError, match=r"node 'xent': the loss of instance .* is nan \(the prediction "
                                             r"from node 'head' holds NaN or inf\)"):
        trainer.train_epoch()


# --- flags a mode ignores, --resume, extras -----------------------------------------------------


@pytest.mark.parametrize(("argv", "match"), [
    (["--n-sync", "3"], r"--n-sync: for device backends"),
    (["--bitstream", "x.bit"], r"--bitstream: for device backends"),
    (["--backend", "csim", "--bitstream", "x.bit", "--numerics", "fixed"], r"--bitstream: only with --backend pynq"),
    (["--backend", "numpy-device", "--project", "p", "--numerics", "fixed"], r"--project: only with --backend csim or rtlsim"),
    (["--eval-every", "2"], r"--eval-every: only with --distributed"),
    (["--warm-start", "c.npz"], r"--warm-start: only with --distributed"),
    (["--distributed", "--backend", "rtlsim"], r"--backend rtlsim: --distributed trains on the cpu runtime only"),
    (["--distributed", "--sync"], r"--sync: --distributed is asynchronous"),
    (["--distributed", "--log", "x.csv"], r"--log: not written under --distributed"),
    (["--resume", "c.npz", "--lr", "0.1", "--mak", "2"], r"--mak, --lr: a resumed run keeps its checkpoint's settings"),
    (["--log", "run.txt"], r"epoch log run.txt: use a .csv or .jsonl file"),
    (["--dataset-size", "50"], r"model 'mlp': its data set has a fixed size"),
    (["--data", "d.jsonl", "--dataset-size", "50"], r"--dataset-size sizes the model's own data set, --data replaces it"),
])
def test_a_flag_the_mode_ignores_is_an_error(argv, match, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d.jsonl").write_text('{"x": 1}\n')
    assert main(["train", "mlp", "--quiet", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("amp-hls: error: ") and err.count("\n") == 1
    assert __import__("re").search(match, err), err


def test_dataset_size_sizes_qm9(tmp_path, capsys):
    pytest.importorskip("qm9pack")
    pytest.importorskip("rdkit")
    summary = tmp_path / "q.json"
    assert main(["train", "ggsnn-qm9", "--dataset-size", "40", "--epochs", "1", "--no-target", "--quiet",
                 "--json", str(summary)]) == 0
    assert json.loads(summary.read_text())["instances"] == 28  # 70% of 40 molecules
    assert main(["train", "ggsnn-qm9", "--dataset-size", "some", "--quiet"]) == 2
    assert "--dataset-size must be a positive integer or 'all', got 'some'" in capsys.readouterr().err


def test_resume_takes_more_epochs_only(tmp_path, capsys):
    c = tmp_path / "c.npz"
    assert main(["train", "mlp", "--epochs", "1", "--quiet", "--checkpoint", str(c)]) == 0
    assert main(["train", "mlp", "--resume", str(c), "--epochs", "2", "--quiet", "--log", str(tmp_path / "l.csv")]) == 0
    rows = list(csv.DictReader((tmp_path / "l.csv").open()))
    assert [r["epoch"] for r in rows] == ["2"]  # the resumed epoch, appended
    config = tmp_path / "c.toml"
    config.write_text("[training]\nlr = 0.1\n")
    assert main(["train", "mlp", "--resume", str(c), "--config", str(config), "--quiet"]) == 2
    assert "drop the file's [training] and [precision] sections" in capsys.readouterr().err


def _blocked(monkeypatch, *modules: str) -> None:
    """As on a core-only install: these modules cannot be imported."""
    for m in modules:
        monkeypatch.setitem(sys.modules, m, None)


def test_a_missing_extra_is_named_with_its_pip_line_before_any_work(monkeypatch, capsys, tmp_path):
    _blocked(monkeypatch, "matplotlib")
    assert main(["train", "list-rnn", "--plot", str(tmp_path / "p.png"), "--quiet"]) == 2
    assert "--plot needs matplotlib: pip install 'amp-hls[plot]'" in capsys.readouterr().err
    assert not (tmp_path / "p.png").exists()
    _blocked(monkeypatch, "sklearn")
    assert main(["train", "mlp", "--quiet"]) == 2
    assert "the digits data set needs sklearn: pip install 'amp-hls[data]'" in capsys.readouterr().err
    assert main(["demo"]) == 2  # before it trains anything
    captured = capsys.readouterr()
    assert "the demo (mlp learns scikit-learn's digits) needs sklearn: pip install 'amp-hls[data]'" in captured.err
    assert "==" not in captured.out


def test_tensorboard_needs_a_writer(tmp_path, capsys):
    if tensorboard_available():
        pytest.skip("a TensorBoard writer is installed: test_tensorboard_events covers it")
    assert main(["train", "mlp", "--tensorboard", str(tmp_path / "tb"), "--quiet"]) == 2
    assert "pip install 'amp-hls[tensorboard]'" in capsys.readouterr().err


def test_tensorboard_events(tmp_path):
    if not tensorboard_available():
        pytest.skip("no TensorBoard writer (tensorboardX, or torch with tensorboard) installed")
    api.train(MODELS["mlp"], TrainConfig(epochs=2, target=None), splits=_small_mlp(), tensorboard=tmp_path / "tb")
    assert list((tmp_path / "tb").rglob("events.out.tfevents.*"))


# --- the epoch log and the plot -----------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_the_epoch_log_is_written_as_training_goes(tmp_path, suffix):
    path = tmp_path / f"log{suffix}"
    seen = []

    def read_back(record: EpochRecord) -> None:  # the file, while training is still going
        text = path.read_text()
        seen.append(len(list(csv.DictReader(io.StringIO(text)))) if suffix == ".csv" else len(text.splitlines()))

    trainer = api.train(MODELS["mlp"], TrainConfig(epochs=3, target=None), splits=_small_mlp(), log=path,
                        on_epoch=read_back)
    assert seen == [1, 2, 3]
    if suffix == ".csv":
        rows = list(csv.DictReader(path.open()))
        assert [int(r["epoch"]) for r in rows] == [1, 2, 3]
        assert float(rows[-1]["val_metric"]) == pytest.approx(trainer.history[-1].val_metric)
    else:
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        assert rows[1] == {k: getattr(trainer.history[1], k) for k in rows[1]}


def test_the_plot_shows_loss_and_metric_per_epoch_for_train_and_validation(tmp_path):
    pytest.importorskip("matplotlib")
    from amp_hls.runtime.report import history_figure

    history = [EpochRecord(e, 0.1 * e, 1.0 / e, 0.5 + 0.1 * e, 1.2 / e, 0.4 + 0.1 * e, 100 * e) for e in (1, 2, 3)]
    fig = history_figure(history, "accuracy", target=0.9)
    loss, metric = fig.axes
    assert loss.get_xlabel() == metric.get_xlabel() == "epoch"
    assert (loss.get_ylabel(), metric.get_ylabel()) == ("loss", "accuracy")
    lines = {ln.get_label(): ln for ln in metric.get_lines()}
    assert list(lines["training"].get_xdata()) == [1, 2, 3]
    assert list(lines["validation"].get_ydata()) == pytest.approx([0.5, 0.6, 0.7])
    assert list(lines["target 0.9"].get_ydata()) == [0.9, 0.9]
    assert list({ln.get_label(): ln for ln in loss.get_lines()}["training"].get_ydata()) == pytest.approx([1, 0.5, 1 / 3])
    png = tmp_path / "run.png"
    assert main(["train", "mlp", "--epochs", "1", "--quiet", "--plot", str(png)]) == 0
    assert png.read_bytes().startswith(b"\x89PNG")


def test_a_log_reopened_to_append_keeps_one_header(tmp_path):
    path = tmp_path / "l.csv"
    record = EpochRecord(1, 1.0, 0.5, 0.5, 0.5, 0.5, 10)
    for append in (False, True):
        log = EpochLog(path, append=append)
        log.write(record)
        log.close()
    assert path.read_text().count("epoch,") == 1 and len(path.read_text().splitlines()) == 3


# --- packaging basics ---------------------------------------------------------------------------


def test_version_is_one_definition(capsys):
    from importlib.metadata import version

    assert amp_hls.__version__ == version("amp-hls")
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == f"amp-hls {amp_hls.__version__}"
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert f"## [{amp_hls.__version__}]" in changelog


def test_license_and_typing_marker_ship():
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text
    assert (Path(amp_hls.__file__).parent / "py.typed").is_file()


def test_output_survives_a_closed_pipe(monkeypatch):
    read, write = os.pipe()
    os.close(read)  # the reader left, as `head` does
    out = io.TextIOWrapper(os.fdopen(write, "wb"), write_through=True)
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "argv", ["amp-hls", "models"])
    assert console() == EXIT_BROKEN_PIPE
    print("more", file=out)  # the pipe's descriptor leads to /dev/null now: no second error
    out.close()


def test_the_public_api_is_the_cli_s():
    assert set(amp_hls.__all__) <= set(dir(amp_hls))
    for name in ("Graph", "ModelSpec", "Feed", "rows", "train", "evaluate", "predict", "generate", "report",
                 "load_dataset", "load_model", "training_config", "load_config"):
        assert name in amp_hls.__all__
    from amp_hls.cli import train as cli_train

    assert cli_train.api is api  # the CLI calls the same functions
    with pytest.raises(AmpHlsError, match="neither a zoo model"):
        amp_hls.load_model("no-such-model")
