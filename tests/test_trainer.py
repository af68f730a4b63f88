"""The Trainer (docs/contracts.md, IR): accuracy targets, mak/muf semantics, staleness, summaries, resume."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from amp_hls.datasets import Splits
from amp_hls.errors import AmpHlsError
from amp_hls.models import MODELS
from amp_hls.runtime import OptimizerConfig, TrainConfig, Trainer
from amp_hls.runtime.report import write_json

SUMMARY_KEYS = {
    "model", "backend", "numerics", "epochs", "test_accuracy", "wall_s", "instances_per_s",
    "conservation_ok", "staleness",
}


def _config(model: str, **overrides) -> TrainConfig:
    """The model's default hyper-parameters (as `amp-hls train MODEL` uses them), seed 0."""
    entry = MODELS[model]
    d = entry.defaults
    doc = {
        "mak": d["mak"], "muf": d["muf"], "optimizer": OptimizerConfig("adam", lr=d["lr"]),
        "epochs": d["epochs"], "seed": 0, "target": entry.target,
    }
    doc.update(overrides)
    return TrainConfig(**doc)


_FULL: dict[str, Splits] = {}


def _subset(model: str, n_train: int, n_val: int = 60, n_test: int = 60) -> Splits:
    if model not in _FULL:
        _FULL[model] = MODELS[model].data(0)
    full = _FULL[model]
    return Splits(full.name, full.train[:n_train], full.val[:n_val], full.test[:n_test])


def _params(trainer: Trainer) -> dict[str, np.ndarray]:
    return {f"{k.name}/{n}": v for k in trainer.param_kernels for n, v in k.params.items()}


# accuracy: product targets on the full data with the model defaults -----------------------------


def test_mlp_async_float_reaches_product_accuracy():
    trainer = Trainer(MODELS["mlp"], _config("mlp", target=None))  # every default epoch
    trainer.fit()
    s = trainer.summary()
    assert s["epochs"] == MODELS["mlp"].defaults["epochs"]
    assert s["test_accuracy"] >= 0.95, s["test_accuracy"]
    assert s["conservation_ok"] is True, s["conservation_problems"]
    assert s["mode"] == "async"


def test_list_rnn_async_float_reaches_product_accuracy():
    trainer = Trainer(MODELS["list-rnn"], _config("list-rnn"))
    trainer.fit()
    s = trainer.summary()
    assert s["test_accuracy"] >= 0.95, s["test_accuracy"]
    assert s["conservation_ok"] is True, s["conservation_problems"]
    # the unrolled cell sees real staleness; the head, once per instance, hardly any
    assert s["staleness"]["rnn"]["max"] > 0


# modes -------------------------------------------------------------------------------------------


def test_sync_baseline_learns_with_zero_staleness():
    trainer = Trainer(MODELS["mlp"], _config("mlp", sync=True, epochs=6, target=None))
    trainer.fit()
    s = trainer.summary()
    assert s["mode"] == "sync"
    assert s["test_accuracy"] >= 0.9, s["test_accuracy"]
    assert s["conservation_ok"] is True
    assert set(s["staleness"]) == {"fc0", "head"}
    for node, st in s["staleness"].items():
        assert st["count"] > 0, node
        assert st["max"] == 0 and st["mean"] == 0.0, (node, st)


def test_list_rnn_async_records_staleness_on_the_cell():
    trainer = Trainer(MODELS["list-rnn"], _config("list-rnn", epochs=1), _subset("list-rnn", 150))
    trainer.fit()
    st = trainer.staleness()
    assert st["rnn"]["max"] > 0 and st["rnn"]["mean"] > 0
    assert st["rnn"]["count"] > st["head"]["count"] == 150  # one head backward per instance
    assert trainer.summary()["conservation_ok"] is True


def test_fixed_numerics_trains_and_reports_saturations():
    trainer = Trainer(MODELS["mlp"], _config("mlp", numerics="fixed", epochs=3, target=None))
    trainer.fit()
    s = trainer.summary()
    assert s["numerics"] == "fixed"
    assert s["test_accuracy"] >= 0.9, s["test_accuracy"]
    assert s["conservation_ok"] is True
    assert isinstance(s["saturations"], dict)
    assert all(isinstance(k, str) and isinstance(v, int) and v > 0 for k, v in s["saturations"].items())
    assert all(k.grads["weight"].dtype == np.int64 for k in trainer.param_kernels)


# mak and muf -------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["mlp", "list-rnn"])
@pytest.mark.parametrize("mak", [1, 5])
def test_mak_bounds_instances_in_flight(model, mak, monkeypatch):
    trainer = Trainer(MODELS[model], _config(model, mak=mak, epochs=1), _subset(model, 60, 10, 10))
    engine = trainer.engine
    seen: list[int] = []
    step, inject = engine.step, engine.inject

    def recording_step():
        seen.append(engine.active_keys)
        return step()

    def recording_inject(key, inputs):
        inject(key, inputs)
        seen.append(engine.active_keys)

    monkeypatch.setattr(engine, "step", recording_step)
    monkeypatch.setattr(engine, "inject", recording_inject)
    trainer.train_epoch()
    assert seen and max(seen) == mak  # reached, never exceeded
    assert engine.active_keys == 0


@pytest.mark.parametrize("model", ["mlp", "list-rnn"])
@pytest.mark.parametrize("muf", [1, 7])
def test_muf_updates_only_after_enough_gradients(model, muf, monkeypatch):
    trainer = Trainer(MODELS[model], _config(model, muf=muf, epochs=1), _subset(model, 80, 10, 10))
    applied: dict[str, list[int]] = {k.name: [] for k in trainer.param_kernels}
    apply = trainer._apply

    def recording_apply(kernel):
        applied[kernel.name].append(kernel.n_grads)
        apply(kernel)
        assert kernel.n_grads == 0

    monkeypatch.setattr(trainer, "_apply", recording_apply)
    trainer.train_epoch()
    for kernel in trainer.param_kernels:
        sizes = applied[kernel.name]
        grads_in = trainer.engine.counts[kernel.name].bwd_in
        assert sizes, kernel.name
        assert min(sizes) >= muf, (kernel.name, sizes)
        assert kernel.version == len(sizes)  # one version per update, no other
        assert kernel.version * muf <= grads_in
        assert sum(sizes) + kernel.n_grads == grads_in  # every gradient counted once
        assert kernel.n_grads < muf  # nothing left that should have been applied
        assert trainer.optimizer.steps[kernel.name] == kernel.version


def test_an_update_applies_the_mean_gradient():
    lr = 0.125
    trainer = Trainer(MODELS["mlp"], _config("mlp", optimizer=OptimizerConfig("sgd", lr=lr, clip=None)),
                      _subset("mlp", 10, 5, 5))
    kernel = trainer.engine.kernels["head"]
    before = {k: v.copy() for k, v in kernel.params.items()}
    rng = np.random.default_rng(0)
    kernel.grads = {k: rng.normal(size=v.shape).astype(v.dtype) for k, v in kernel.params.items()}
    kernel.n_grads = 4
    grads = {k: v.copy() for k, v in kernel.grads.items()}
    trainer._apply(kernel)
    for k in before:
        expected = (before[k].astype(np.float64) - lr * grads[k].astype(np.float64) / 4).astype(before[k].dtype)
        np.testing.assert_array_equal(kernel.params[k], expected)
        assert not kernel.grads[k].any()
    assert kernel.version == 1 and kernel.n_grads == 0


def test_sync_updates_once_per_batch():
    n, batch = 50, 8
    trainer = Trainer(MODELS["mlp"], _config("mlp", mak=batch, sync=True, epochs=1), _subset("mlp", n))
    trainer.train_epoch()
    for kernel in trainer.param_kernels:
        assert kernel.version == -(-n // batch)
        assert kernel.n_grads == 0


# the loop ----------------------------------------------------------------------------------------


def test_fit_stops_at_the_target():
    trainer = Trainer(MODELS["mlp"], _config("mlp", epochs=5, target=0.0), _subset("mlp", 40))
    history = trainer.fit()
    assert len(history) == 1 and trainer.epoch == 1
    assert trainer.reached_target
    assert trainer.time_to_target() == history[0].wall_s > 0
    s = trainer.summary()
    assert s["reached_target"] is True and s["time_to_target_s"] == history[0].wall_s


def test_fit_without_target_runs_every_epoch():
    trainer = Trainer(MODELS["mlp"], _config("mlp", epochs=3, target=None), _subset("mlp", 40))
    history = trainer.fit()
    assert [r.epoch for r in history] == [1, 2, 3]
    assert [r.instances for r in history] == [40, 80, 120]
    assert all(a.wall_s < b.wall_s for a, b in zip(history, history[1:]))
    assert not trainer.reached_target and trainer.time_to_target() is None


def test_evaluate_is_a_function_of_the_weights():
    trainer = Trainer(MODELS["list-rnn"], _config("list-rnn", epochs=1), _subset("list-rnn", 40, 80))
    trainer.train_epoch()
    first = trainer.evaluate(trainer.splits.val)
    again = trainer.evaluate(trainer.splits.val)
    assert (first.loss, first.metric, first.count) == (again.loss, again.metric, again.count)
    assert first.count == 80


def test_summary_has_the_contract_keys_and_is_json(tmp_path):
    trainer = Trainer(MODELS["list-rnn"], _config("list-rnn", epochs=1), _subset("list-rnn", 40))
    trainer.fit()
    s = trainer.summary()
    assert SUMMARY_KEYS <= s.keys()
    assert s["model"] == "list-rnn" and s["backend"] == "cpu" and s["numerics"] == "float"
    assert s["epochs"] == 1
    assert 0.0 <= s["test_accuracy"] <= 1.0
    assert s["wall_s"] > 0 and s["instances_per_s"] > 0
    assert s["conservation_ok"] is True
    assert set(s["staleness"]) == {"rnn", "head"}
    assert all(set(v) == {"mean", "max", "count"} for v in s["staleness"].values())
    write_json(s, tmp_path / "s.json")
    doc = json.loads((tmp_path / "s.json").read_text(), parse_constant=pytest.fail)
    assert SUMMARY_KEYS <= doc.keys()
    assert TrainConfig.from_json(doc["config"]) == trainer.config


@pytest.mark.parametrize("field", ["mak", "muf", "epochs", "max_batch"])
def test_invalid_train_config_raises(field):
    with pytest.raises(AmpHlsError, match=field):
        TrainConfig(**{field: 0})


# checkpoints -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "model, overrides",
    [
        ("mlp", {}),
        ("mlp", {"numerics": "fixed"}),
        ("mlp", {"sync": True}),
        ("list-rnn", {}),
    ],
    ids=["mlp", "mlp-fixed", "mlp-sync", "list-rnn"],
)
def test_resume_continues_exactly(model, overrides, tmp_path):
    # odd sizes and muf so partial gradient accumulations straddle the epoch boundary
    splits = _subset(model, 123, 40, 40)
    config = _config(model, mak=6, muf=5, epochs=2, target=None, **overrides)
    straight = Trainer(MODELS[model], config, splits)
    straight.fit()

    ckpt = tmp_path / "run.npz"
    first = Trainer(MODELS[model], TrainConfig.from_json({**config.to_json(), "epochs": 1}), splits)
    first.fit(checkpoint=ckpt)
    resumed = Trainer.resume(MODELS[model], ckpt, splits, epochs=2)
    assert resumed.epoch == 1 and resumed.config == config
    resumed.fit()

    assert resumed.epoch == straight.epoch == 2
    a, b = _params(straight), _params(resumed)
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].dtype == b[name].dtype
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    for ka, kb in zip(straight.param_kernels, resumed.param_kernels):
        assert ka.version == kb.version and ka.n_grads == kb.n_grads
    assert straight.optimizer.steps == resumed.optimizer.steps
    for ra, rb in zip(straight.history, resumed.history, strict=True):
        assert (ra.epoch, ra.train_loss, ra.train_metric, ra.val_loss, ra.val_metric, ra.instances) == (
            rb.epoch, rb.train_loss, rb.train_metric, rb.val_loss, rb.val_metric, rb.instances
        )
    assert straight.next_key == resumed.next_key
    assert straight.evaluate(splits.test) == resumed.evaluate(splits.test)


def _small_checkpoint(tmp_path: Path, model: str = "mlp") -> Path:
    trainer = Trainer(MODELS[model], _config(model, epochs=1), _subset(model, 30, 10, 10))
    path = tmp_path / f"{model}.npz"
    trainer.fit(checkpoint=path)
    return path


def test_checkpoint_is_plain_npz(tmp_path):
    path = _small_checkpoint(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlp.npz"]  # no temporary left behind
    with np.load(path, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    assert all(a.dtype != object for a in arrays.values())
    meta = json.loads(str(arrays["meta"]))
    assert meta["model"] == "mlp" and meta["epoch"] == 1
    assert {"param/fc0/weight", "param/fc0/bias", "param/head/weight", "param/head/bias"} <= arrays.keys()
    assert any(k.startswith("opt/") for k in arrays)


def test_resume_of_another_models_checkpoint_raises(tmp_path):
    path = _small_checkpoint(tmp_path, "mlp")
    with pytest.raises(AmpHlsError, match="mlp"):
        Trainer.resume(MODELS["list-rnn"], path, _subset("list-rnn", 10, 5, 5))


def _corrupt(path: Path, how: str) -> None:
    raw = path.read_bytes()
    if how == "garbage":
        path.write_bytes(bytes(range(256)) * 4)
    elif how == "truncated":
        path.write_bytes(raw[: len(raw) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "text":
        path.write_text("not a checkpoint\n")
    elif how == "flipped":
        i = len(raw) // 3
        path.write_bytes(raw[:i] + bytes([raw[i] ^ 0xFF]) + raw[i + 1 :])
    elif how == "no-meta":
        with np.load(path) as data:
            arrays = {k: data[k] for k in data.files if k != "meta"}
        np.savez(path, **arrays)
    elif how == "bad-meta":
        with np.load(path) as data:
            arrays = {k: data[k] for k in data.files}
        np.savez(path, **{**arrays, "meta": np.array("{broken")})
    elif how == "missing-array":
        with np.load(path) as data:
            arrays = {k: data[k] for k in data.files if k != "param/fc0/weight"}
        np.savez(path, **arrays)
    elif how == "missing-file":
        path.unlink()


@pytest.mark.parametrize(
    "how", ["garbage", "truncated", "empty", "text", "flipped", "no-meta", "bad-meta",
            "missing-array", "missing-file"],
)
def test_corrupt_checkpoint_gives_amphls_error(tmp_path, how):
    path = _small_checkpoint(tmp_path)
    _corrupt(path, how)
    with pytest.raises(AmpHlsError, match="checkpoint"):
        Trainer.resume(MODELS["mlp"], path, _subset("mlp", 30, 10, 10))
