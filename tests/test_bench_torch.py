"""The PyTorch peers (bench/torch_peers.py) mirror the amp-hls models, and bench/run.py merges them.

Mirroring is checked exactly: the same parameters (names, shapes, count), and on weights copied
from an amp-hls Engine the same per-instance loss (float64, eager and batched) and the same
gradients as the Engine's backward.
"""

from __future__ import annotations

import functools
import json
from dataclasses import replace

import numpy as np
import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

from amp_hls.datasets import Example, Splits  # noqa: E402
from amp_hls.datasets.babi import GraphData  # noqa: E402
from amp_hls.datasets.qm9 import QM9_EDGE_TYPES, QM9_FEATURES  # noqa: E402
from amp_hls.kernels import ParamKernel  # noqa: E402
from amp_hls.models import MODELS  # noqa: E402
from amp_hls.numerics import FLOAT64  # noqa: E402
from amp_hls.runtime.engine import Engine  # noqa: E402
from amp_hls.runtime.trainer import drain_losses  # noqa: E402
from bench import run as bench  # noqa: E402
from bench import torch_peers as tp  # noqa: E402


def fake_molecules(n: int, seed: int = 0) -> list[Example]:
    """Small random molecule-shaped graphs for the QM9 graph (no qm9 extra needed)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        atoms = int(rng.integers(1, 10))
        nodes = np.zeros((atoms, QM9_FEATURES))
        nodes[np.arange(atoms), rng.integers(0, 4, atoms)] = 1.0
        nodes[:, 9] = rng.integers(0, 2, atoms)
        edges = []
        for _ in QM9_EDGE_TYPES:
            pairs = [(a, b) for a in range(atoms) for b in range(a + 1, atoms) if rng.random() < 0.2][:6]
            edges.append(np.array([e for a, b in pairs for e in ((a, b), (b, a))], dtype=np.int64).reshape(-1, 2))
        out.append(Example(GraphData(nodes, tuple(edges), target=float(rng.normal())), i))
    return out


@functools.cache
def splits(name: str) -> Splits:
    """A model's seed-0 splits, generated once for the whole module."""
    return MODELS[name].data(0)


def entry_and_examples(name: str, n: int = 6):
    if name == "ggsnn-qm9":  # the real graph and entry, synthetic molecules
        return MODELS[name], fake_molecules(n)
    return MODELS[name], list(splits(name).val[:n])


MIRRORED = ["list-rnn", "tree-rnn", "ggsnn-qm9", "ggsnn-babi15"]


@pytest.mark.parametrize("name", MIRRORED)
def test_peer_has_the_same_parameters(name):
    entry, _ = entry_and_examples(name)
    engine = Engine(entry.build(), seed=0)
    amp = {(k.name, p): v.shape for k in engine.kernels.values() if isinstance(k, ParamKernel)
           for p, v in k.params.items()}
    peer = tp.make_peer(entry)
    mine = {(n, p): tuple(t.shape) for n, lin in peer.linears.items() for p, t in lin.named_parameters()}
    assert mine == amp
    assert sum(t.numel() for t in peer.parameters()) == sum(int(np.prod(s)) for s in amp.values())


@pytest.mark.parametrize("name", MIRRORED)
def test_same_weights_give_the_same_losses_and_gradients_in_float64(name):
    entry, examples = entry_and_examples(name)
    graph = entry.build()
    engine = Engine(graph, FLOAT64, seed=5, train=False)
    for key, ex in enumerate(examples):
        engine.inject(key, entry.inputs(ex))
    engine.run()
    amp = np.array([r.loss for r in sorted(drain_losses(engine), key=lambda r: r.tag.key)])

    peer = tp.make_peer(entry).double()
    peer.load_from_engine(engine)
    insts = peer.prepare(examples)
    eager = np.array([float(peer.forward_one(inst)[0].sum().detach()) for inst in insts])
    batched = peer.forward_batch(insts)[0].detach().numpy()
    np.testing.assert_allclose(eager, amp, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(batched, amp, rtol=1e-12, atol=1e-12)

    # one instance's backward: the Engine's accumulated gradients = autograd's
    train = Engine(graph, FLOAT64, seed=5)
    train.inject(0, entry.inputs(examples[-1]))
    train.run()
    peer.zero_grad()
    peer.forward_one(insts[-1])[0].sum().backward()
    for name_, lin in peer.linears.items():
        kernel = train.kernels[name_]
        for p, t in lin.named_parameters():
            np.testing.assert_allclose(t.grad.numpy(), kernel.grads[p], rtol=1e-9, atol=1e-12)


def tiny(name: str, n_train: int = 32, n_val: int = 16) -> Splits:
    if name == "ggsnn-qm9":
        data = fake_molecules(n_train + 2 * n_val)
        return Splits("fake", data[:n_train], data[n_train:n_train + n_val], data[n_train + n_val:])
    s = splits(name)
    return Splits(s.name, s.train[:n_train], s.val[:n_val], s.test[:n_val])


@pytest.mark.parametrize("name", ["list-rnn", "tree-rnn", "ggsnn-qm9"])
@pytest.mark.parametrize("mode", tp.MODES)
def test_torch_trainer_smoke(name, mode):
    entry, _ = entry_and_examples(name)
    config = bench.train_config(entry, False, seed=0, epochs=2)
    trainer = tp.TorchTrainer(entry, config, tiny(name), mode=mode, every=4, batch=8)
    start = [t.detach().clone() for t in trainer.model.parameters()]
    trainer.fit()
    s = trainer.summary()
    assert s["backend"] == f"torch-{mode}" and s["epochs"] == 2 and s["instances"] == 64
    assert s["instances_per_s"] > 0 and np.isfinite(s["test_metric"])
    assert len(trainer.history) == 2 and trainer.history[-1].wall_s == pytest.approx(s["wall_s"])
    assert all(not torch.equal(a, b) for a, b in zip(start, trainer.model.parameters()))  # it trained


def test_torch_starts_from_the_amp_trainers_weights():
    entry = MODELS["list-rnn"]
    config = bench.train_config(entry, False, seed=3, epochs=1)
    trainer = tp.TorchTrainer(entry, config, tiny("list-rnn"))
    engine = Engine(entry.build(), seed=3)
    for name, lin in trainer.model.linears.items():
        np.testing.assert_array_equal(lin.weight.detach().numpy(), engine.kernels[name].params["weight"])


def test_ratios_are_torch_over_amp_time_and_amp_over_torch_rate():
    systems = {"amp_async": {"instances_per_s": 300.0, "time_to_target_s": 2.0},
               "torch_eager": {"instances_per_s": 100.0, "time_to_target_s": 30.0},
               "torch_batched": {"instances_per_s": 900.0, "time_to_target_s": None}}
    r = bench.ratios(systems)
    assert r == {"speedup_vs_torch_eager": 15.0, "speedup_vs_torch_batched": None,
                 "instances_per_s_vs_torch_eager": 3.0, "instances_per_s_vs_torch_batched": 1 / 3}
    assert bench.ratios({**systems, "amp_async": {"instances_per_s": 1.0, "time_to_target_s": None}})[
        "speedup_vs_torch_eager"] is None  # amp-hls missing the target: no ratio either


def test_bench_run_merges_torch_systems(tmp_path, monkeypatch, capsys):
    small = tiny("list-rnn", 48, 16)
    entry = replace(MODELS["list-rnn"], data=lambda seed: small, target=0.0)
    monkeypatch.setitem(bench.MODELS, "list-rnn", entry)
    out = tmp_path / "quick.json"
    out.write_text(json.dumps({"models": {"list-rnn": {"systems": {"other": {"x": 1}},
                                                       "ratios": {"other_ratio": 2.0}}}}))
    plan = replace(bench.PLANS["quick"], epochs={"list-rnn": 2})
    bench.run(plan, ["list-rnn"], out)
    doc = json.loads(out.read_text())
    model = doc["models"]["list-rnn"]
    assert model["systems"]["other"] == {"x": 1} and model["ratios"]["other_ratio"] == 2.0
    assert set(bench.SYSTEMS) <= model["systems"].keys()
    s = model["systems"]
    for system in bench.SYSTEMS:  # target 0: every system reaches it after its first epoch
        assert s[system]["reached_target_runs"] == 1 and s[system]["epochs"] == 1
    assert s["torch_eager"]["config"]["update_every"] == bench.TORCH_EAGER_EVERY
    assert s["torch_batched"]["config"]["batch"] == bench.TORCH_BATCH["list-rnn"]
    assert s["amp_async"]["runs"][0]["mean_staleness"] >= 0
    r = model["ratios"]
    assert r["speedup_vs_torch_eager"] == pytest.approx(
        s["torch_eager"]["time_to_target_s"] / s["amp_async"]["time_to_target_s"])
    assert r["instances_per_s_vs_torch_batched"] == pytest.approx(
        s["amp_async"]["instances_per_s"] / s["torch_batched"]["instances_per_s"])
    assert (tmp_path / "list-rnn_quick.png").stat().st_size > 0
    assert "speedup" in capsys.readouterr().out


def test_asking_for_torch_without_it_fails_cleanly(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(bench, "torch_available", lambda: False)
    out = tmp_path / "x.json"
    assert bench.main(["--quick", "--models", "list-rnn", "--systems", "torch_eager", "--out", str(out)]) == 1
    assert "amp-hls[bench]" in capsys.readouterr().err and not out.exists()


def test_deadline_shares_time_by_weight():
    clock = bench.Clock(100.0, ["amp_async", "torch_batched"])
    assert clock.next_budget("amp_async") == pytest.approx(80.0, abs=0.5)  # 2 / (2 + 0.5)
    assert clock.next_budget("torch_batched") == pytest.approx(100.0, abs=0.5)  # the rest
    assert bench.Clock(None, ["amp_async"]).next_budget("amp_async") is None
