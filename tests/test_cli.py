"""The `amp-hls` command line: models, summary, export and train (JSON, plot, checkpoint, resume)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from amp_hls.cli import build_parser, main
from amp_hls.ir import load
from amp_hls.models import MODELS

SUMMARY_KEYS = {
    "model", "backend", "numerics", "epochs", "test_accuracy", "wall_s", "instances_per_s",
    "conservation_ok", "staleness",
}
TRAIN_OPTIONS = [
    "--mak", "--muf", "--optimizer", "--lr", "--epochs", "--seed", "--numerics", "--target",
    "--json", "--plot", "--checkpoint", "--resume", "--sync",
]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_models_lists_the_zoo(capsys):
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    for name, entry in MODELS.items():
        assert name in out and entry.description in out


def test_summary_of_a_zoo_model(capsys):
    assert main(["summary", "list-rnn"]) == 0
    out = capsys.readouterr().out
    assert "list_rnn" in out
    for node in ("rnn", "head", "more", "advance", "xent"):
        assert node in out


def test_export_then_summary_of_the_file(tmp_path, capsys):
    path = tmp_path / "x.json"
    assert main(["export", "mlp", "-o", str(path)]) == 0
    assert path.exists()
    json.loads(path.read_text())
    assert load(str(path)).nodes.keys() == MODELS["mlp"].build().nodes.keys()
    capsys.readouterr()
    assert main(["summary", str(path)]) == 0
    from_file = capsys.readouterr().out
    assert main(["summary", "mlp"]) == 0
    assert from_file == capsys.readouterr().out


def test_unknown_model_is_a_clear_error(capsys):
    assert main(["summary", "no-such-model"]) == 2
    err = capsys.readouterr().err
    assert "amp-hls: error:" in err and "no-such-model" in err
    assert "mlp" in err  # it says what would have worked


def test_unknown_model_for_train_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["train", "no-such-model"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "no-such-model" in err and "mlp" in err and "list-rnn" in err


def test_train_help_lists_the_options(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["train", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for option in TRAIN_OPTIONS:
        assert option in out, option


def test_train_defaults_come_from_the_model():
    from amp_hls.cli.train import config_from_args

    args = build_parser().parse_args(["train", "list-rnn"])
    c = config_from_args(args)
    d = MODELS["list-rnn"].defaults
    assert (c.mak, c.muf, c.optimizer.lr, c.epochs) == (d["mak"], d["muf"], d["lr"], d["epochs"])
    assert c.target == MODELS["list-rnn"].target and not c.sync and c.numerics == "float"
    args = build_parser().parse_args(["train", "mlp", "--mak", "3", "--muf", "2", "--lr", "0.5",
                                      "--optimizer", "sgd", "--clip", "0", "--no-target", "--sync"])
    c = config_from_args(args)
    assert (c.mak, c.muf, c.optimizer.lr, c.optimizer.kind, c.optimizer.clip, c.target, c.sync) == (
        3, 2, 0.5, "sgd", None, None, True
    )


@pytest.mark.parametrize("option", ["--mak", "--muf", "--epochs", "--lr"])
def test_train_rejects_zero_settings(option, capsys):
    assert main(["train", "mlp", option, "0", "--quiet"]) == 2
    assert "amp-hls: error:" in capsys.readouterr().err


def test_train_json_plot_checkpoint_then_resume(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    j, p, c = tmp_path / "run.json", tmp_path / "curve.png", tmp_path / "run.npz"
    argv = ["train", "mlp", "--epochs", "1", "--quiet", "--json", str(j), "--plot", str(p),
            "--checkpoint", str(c)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "test accuracy" in out and "conservation ok" in out

    doc = json.loads(j.read_text(), parse_constant=pytest.fail)  # valid, strict JSON (no NaN)
    assert SUMMARY_KEYS <= doc.keys()
    assert doc["model"] == "mlp" and doc["backend"] == "cpu" and doc["numerics"] == "float"
    assert doc["epochs"] == 1 and len(doc["history"]) == 1
    assert doc["conservation_ok"] is True
    assert 0.5 < doc["test_accuracy"] <= 1.0
    assert doc["wall_s"] > 0 and doc["instances_per_s"] > 0
    assert set(doc["staleness"]) == {"fc0", "head"}

    png = p.read_bytes()
    assert len(png) > 1000 and png.startswith(PNG_MAGIC)

    with np.load(c, allow_pickle=False) as data:
        assert json.loads(str(data["meta"]))["epoch"] == 1

    j2 = tmp_path / "resumed.json"
    assert main(["train", "mlp", "--resume", str(c), "--epochs", "2", "--quiet", "--json", str(j2),
                 "--checkpoint", str(c)]) == 0
    capsys.readouterr()
    doc2 = json.loads(j2.read_text())
    assert doc2["epochs"] == 2 and [r["epoch"] for r in doc2["history"]] == [1, 2]
    assert doc2["history"][0] == doc["history"][0]  # the first epoch carried over, not rerun
    assert doc2["instances"] == 2 * doc["instances"]
    assert doc2["config"] == {**doc["config"], "epochs": 2}
    with np.load(c, allow_pickle=False) as data:
        assert json.loads(str(data["meta"]))["epoch"] == 2


def test_train_resume_of_another_models_checkpoint_fails_cleanly(tmp_path, capsys):
    c = tmp_path / "mlp.npz"
    assert main(["train", "mlp", "--epochs", "1", "--quiet", "--checkpoint", str(c)]) == 0
    capsys.readouterr()
    assert main(["train", "list-rnn", "--resume", str(c), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "amp-hls: error:" in err and "mlp" in err


def test_train_resume_of_a_corrupt_file_fails_cleanly(tmp_path, capsys):
    c = tmp_path / "bad.npz"
    c.write_bytes(b"PK\x03\x04 definitely not a zip archive")
    assert main(["train", "mlp", "--resume", str(c), "--quiet"]) == 2
    assert "checkpoint" in capsys.readouterr().err


def test_train_shows_a_progress_bar_unless_quiet(capsys):
    assert main(["train", "mlp", "--epochs", "1", "--no-target"]) == 0
    err = capsys.readouterr().err
    assert "training mlp on digits" in err and "epoch 1/1" in err and "val_acc" in err
