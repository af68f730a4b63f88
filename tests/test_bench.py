"""The async-vs-sync benchmark machinery on a tiny run: JSON shape, merging, ratios, CLI."""

from __future__ import annotations

import json

import pytest

from bench import run as bench


def test_smoke_run_writes_ratios_and_keeps_other_benchmarks_keys(tmp_path, capsys):
    out = tmp_path / "quick.json"
    out.write_text(json.dumps({
        "machine": {"gpu": "none"},
        "models": {
            "mlp": {"systems": {"torch": {"instances_per_s": 1.0},
                                "amp_async": {"stale": True}},
                    "ratios": {"amp_vs_torch_instances_per_s": 2.0}},
            "gnn": {"systems": {"torch": {"instances_per_s": 3.0}}},
        },
        "notes": "kept",
    }))

    assert bench.main(["--quick", "--models", "mlp", "--epochs", "1", "--out", str(out)]) == 0

    doc = json.loads(out.read_text())
    assert doc["notes"] == "kept" and doc["models"]["gnn"] == {"systems": {"torch": {"instances_per_s": 3.0}}}
    assert doc["machine"]["gpu"] == "none" and doc["machine"]["cpus"] >= 1
    assert {"python", "numpy"} <= doc["machine"].keys()
    mlp = doc["models"]["mlp"]
    assert mlp["systems"]["torch"] == {"instances_per_s": 1.0}
    assert mlp["ratios"]["amp_vs_torch_instances_per_s"] == 2.0
    a, s = mlp["systems"]["amp_async"], mlp["systems"]["amp_sync"]
    assert "stale" not in a  # this benchmark's own entries are replaced whole
    for system in (a, s):
        assert system["instances_per_s"] > 0
        assert system["epochs"] == 1 and system["epoch_cap"] == 1
        assert 0 <= system["test_accuracy"] <= 1
        assert "time_to_target_s" in system
    assert a["config"]["mode"] == "async" and s["config"]["mode"] == "sync"
    assert mlp["ratios"]["async_vs_sync_instances_per_s"] == pytest.approx(
        a["instances_per_s"] / s["instances_per_s"])
    assert mlp["ratios"]["async_vs_sync_time_to_target"] is None  # one epoch never reaches 0.98
    assert (tmp_path / "mlp_quick.png").stat().st_size > 0
    printed = capsys.readouterr().out
    assert "amp_async" in printed and "did not reach 0.98" in printed


def test_time_to_target_ratio_is_sync_over_async():
    systems = {"amp_async": {"instances_per_s": 300.0, "time_to_target_s": 2.0},
               "amp_sync": {"instances_per_s": 100.0, "time_to_target_s": 5.0}}
    assert bench.ratios(systems) == {"async_vs_sync_instances_per_s": 3.0,
                                     "async_vs_sync_time_to_target": 2.5}


def test_median_time_counts_a_miss_as_infinitely_slow():
    assert bench.median_time([4.0, None, 2.0]) == 4.0
    assert bench.median_time([None, 1.0, None]) is None


def test_help_and_plan_is_required(capsys):
    with pytest.raises(SystemExit) as exc:
        bench.main(["--help"])
    assert exc.value.code == 0 and "--quick" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        bench.main([])
    assert exc.value.code == 2


def test_defaults_sweep_writes_one_run_per_cell_and_seed(tmp_path, capsys):
    from bench import defaults

    out = tmp_path / "d.json"
    assert defaults.main(["mlp", "--cells", "8:4", "16:8", "--seeds", "0", "1", "--epochs", "1",
                          "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert [(c["mak"], c["muf"]) for c in doc["cells"]] == [(8, 4), (16, 8)]
    runs = [r for c in doc["cells"] for r in c["runs"]]
    assert [r["seed"] for r in runs] == [0, 1, 0, 1]
    for r in runs:  # one epoch: reached (epoch 1) or missed, never anything else
        assert r["epoch_to_target"] in (None, 1)
        assert (r["cpu_time_to_target_s"] is None) == (r["epoch_to_target"] is None)
        assert r["cpu_instances_per_s"] > 0 and 0 <= r["test_metric"] <= 1
    assert capsys.readouterr().out.count("mlp mak") == 2


def test_defaults_sweep_rejects_a_malformed_cell(capsys):
    from bench import defaults

    with pytest.raises(SystemExit):
        defaults.main(["mlp", "--cells", "16x8"])
    assert "MAK:MUF" in capsys.readouterr().err
