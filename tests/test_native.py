"""The native runtime in fixed point: bit-exact with the numpy runtime in deterministic mode
(losses, weights, gradients, optimizer state, staleness, saturations after an epoch), for every
optimizer, async and sync, and checkpoints that move between the two backends."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from amp_hls import api
from amp_hls.errors import AmpHlsError
from amp_hls.ir import Graph
from amp_hls.models import MODELS
from amp_hls.native import NativeTrainer, NativeUnsupported, unsupported_kinds
from amp_hls.native.codegen import generate
from amp_hls.numerics import NumericConfig
from amp_hls.runtime.optim import OptimizerConfig
from amp_hls.runtime.trainer import TrainConfig, Trainer

pytestmark = pytest.mark.gxx


def small(model: str, n: int) -> tuple:
    spec = MODELS[model]
    full = spec.splits(0)
    return spec, dataclasses.replace(full, train=full.train[:n], val=full.val[:40], test=full.test[:40])


def config(**kw: object) -> TrainConfig:
    base = {"mak": 16, "muf": 4, "epochs": 2, "numerics": "fixed",
            "optimizer": OptimizerConfig(kind="adam", lr=3e-3)}
    return TrainConfig(**{**base, **kw})  # type: ignore[arg-type]


def assert_same_state(a: Trainer, b: NativeTrainer, staleness: bool = True) -> None:
    """Every number a checkpoint holds, and the run's counters, equal bit for bit (``staleness``:
    the histograms too, which a checkpoint does not hold)."""
    b._pull()
    for ka in a.param_kernels:
        kb = b.engine.kernels[ka.name]
        for t in ka.params:
            assert np.array_equal(ka.params[t], kb.params[t]), (ka.name, t)  # type: ignore[attr-defined]
            assert np.array_equal(ka.grads[t], kb.grads[t]), (ka.name, t)  # type: ignore[attr-defined]
        assert (ka.version, ka.n_grads) == (kb.version, kb.n_grads)  # type: ignore[attr-defined]
        assert not staleness or ka.staleness.histogram == kb.staleness.histogram  # type: ignore[attr-defined]
    assert a.optimizer.steps == b.optimizer.steps
    sa, sb = a.optimizer.state_arrays(), b.optimizer.state_arrays()
    assert sa.keys() == sb.keys() and all(np.array_equal(sa[k], sb[k]) for k in sa)
    assert a.next_key == b.next_key
    assert not staleness or a.engine.counter.as_dict() == b.run.saturations()


def train_both(model: str, n: int, epochs: int, **kw: object) -> tuple[Trainer, NativeTrainer, list, list]:
    spec, splits = small(model, n)
    a, b = Trainer(spec, config(**kw), splits), NativeTrainer(spec, config(**kw), splits)
    la = [a.train_epoch() for _ in range(epochs)]
    lb = [b.train_epoch() for _ in range(epochs)]
    return a, b, la, lb


@pytest.mark.parametrize("kind", ["sgd", "momentum", "adam"])
def test_mlp_bit_exact_per_optimizer(kind: str) -> None:
    a, b, la, lb = train_both("mlp", 160, 2, optimizer=OptimizerConfig(kind=kind, lr=0.05, clip=0.5))
    assert la == lb  # the mean train loss and accuracy of each epoch, to the last bit
    assert_same_state(a, b)
    assert b.conservation_report() == []


def test_list_rnn_async_bit_exact_with_staleness() -> None:
    a, b, la, lb = train_both("list-rnn", 120, 1)
    assert la == lb
    assert_same_state(a, b)
    assert b.staleness()["rnn"]["max"] > 0  # the loop's forwards ran on weights newer than their backwards


def test_list_rnn_sync_bit_exact() -> None:
    a, b, la, lb = train_both("list-rnn", 70, 1, sync=True, max_batch=8)  # 70: a last partial minibatch
    assert la == lb
    assert_same_state(a, b)
    assert b.staleness()["rnn"]["max"] == 0


def test_saturations_counted_alike() -> None:
    # weights that large saturate the accumulators and narrowings at every site
    a, b, la, lb = train_both("mlp", 48, 1, optimizer=OptimizerConfig(kind="sgd", lr=40.0, clip=None))
    assert la == lb
    assert a.engine.counter.total > 0
    assert_same_state(a, b)


def test_checkpoint_moves_between_backends(tmp_path: Path) -> None:
    spec, splits = small("list-rnn", 60)
    whole = Trainer(spec, config(), splits)
    whole.train_epoch(), whole.train_epoch()
    native = NativeTrainer(spec, config(), splits)
    native.train_epoch()
    native.save(tmp_path / "native.npz")
    cpu = Trainer.resume(spec, tmp_path / "native.npz", splits)  # native -> cpu
    cpu.train_epoch()
    cpu.save(tmp_path / "cpu.npz")
    back = NativeTrainer.resume(spec, tmp_path / "cpu.npz", splits)  # cpu -> native
    assert_same_state(cpu, back, staleness=False)
    for t in (cpu, back):
        for k in whole.param_kernels:
            assert all(np.array_equal(k.params[n], t.parameters()[k.name][n]) for n in k.params)


def test_api_backend_and_summary() -> None:
    spec, splits = small("mlp", 64)
    trainer = api.trainer_for(spec, config(epochs=1), backend="native", splits=splits)
    assert isinstance(trainer, NativeTrainer)
    trainer.fit()
    s = trainer.summary()
    assert s["backend"] == "native" and s["conservation_ok"] and s["instances"] == 64
    assert s["threads"] == 1


@pytest.mark.parametrize("model", ["tree-rnn", "ggsnn-qm9", "ggsnn-babi15", "ggsnn-babi19"])
def test_zoo_bit_exact(model: str) -> None:
    """Sink (tree-rnn's padding); split, broadcast, add, mul, aggregate, rowsum and the mse loss
    with its MAE metric (ggsnn-qm9); the bAbI GGSNNs' softmax cross-entropy over node rows (the
    rest of the zoo: mlp and list-rnn above)."""
    a, b, la, lb = train_both(model, 48, 1)
    assert la == lb
    assert_same_state(a, b)


def test_unsupported_kind_is_named() -> None:
    g = Graph("regroup")
    x = g.source("x", width=2, max_rows=4)
    g.loss(g.group(g.ungroup(x), max_rows=4, name="again"), g.source("t", width=2, max_rows=4), "mse")
    assert unsupported_kinds(g) == ["group"]
    with pytest.raises(NativeUnsupported, match=r"node 'again': the native backend has no group kernel"):
        generate(g.validate(), NumericConfig("fixed"))


def test_cli_refuses_device_flags_on_native(capsys: pytest.CaptureFixture[str]) -> None:
    from amp_hls.cli import main

    assert main(["train", "mlp", "--backend", "native", "--n-sync", "2"]) == 2
    assert "--n-sync: for device backends" in capsys.readouterr().err


def test_threads_sync_bit_exact_async_conserves() -> None:
    """Two workers: sync minibatches sum the same integers in any order, so the weights are the
    numpy ones; async is another schedule, but every message still comes back."""
    a, _, _, _ = train_both("list-rnn", 70, 1, sync=True)
    spec, splits = small("list-rnn", 70)
    b = NativeTrainer(spec, config(sync=True), splits, threads=2)
    b.train_epoch()
    assert_same_state(a, b, staleness=False)
    c = NativeTrainer(spec, config(), splits, threads=2)
    loss, _ = c.train_epoch()
    assert np.isfinite(loss) and c.conservation_report() == []
    assert c.summary()["threads"] == 2 and c.instances == 70
    assert sum(s["count"] for s in c.staleness().values()) > 70


def test_threads_flag_only_for_native(capsys: pytest.CaptureFixture[str]) -> None:
    from amp_hls.cli import main

    assert main(["train", "mlp", "--threads", "2"]) == 2
    assert "--threads: only with --backend native" in capsys.readouterr().err
    with pytest.raises(AmpHlsError, match="threads must be a positive integer"):
        api.trainer_for("mlp", config(epochs=1), backend="native", threads=0, splits=small("mlp", 8)[1])


def test_threads_stall_fails_with_what_it_waited_for() -> None:
    """A worker that stops serving (injected) fails the run within the wait timeout, naming the
    worker and its waiting mail, instead of hanging it."""
    from amp_hls.native.library import NativeThreadError
    from amp_hls.native.partition import partition

    spec, splits = small("list-rnn", 40)
    t = NativeTrainer(spec, config(), splits, threads=2)
    t.run.set_threads(2, partition(t.graph, 2), timeout=0.3)
    t.run.inject_stall(1)
    with pytest.raises(NativeThreadError, match=r"no message was served for [0-9.]+ s .* worker 1 .* mailboxes"):
        t.train_epoch()
    with pytest.raises(AmpHlsError, match="no worker 0 to stall"):
        t.run.inject_stall(0)


@pytest.mark.parametrize("model", ["list-rnn", "tree-rnn", "ggsnn-qm9"])
def test_partition_runs_of_equal_cost(model: str) -> None:
    """Each worker owns one run of consecutive non-source nodes, and no worker's cost exceeds an
    even share by more than its largest node."""
    from amp_hls.ir.nodes import Source
    from amp_hls.native.partition import node_cost, partition

    g = MODELS[model].build()
    for threads in (2, 3):
        owners = partition(g, threads)
        inner = [w for n, w in zip(g.nodes, owners) if not isinstance(g.nodes[n], Source)]
        assert inner == sorted(inner) and set(inner) == set(range(threads))
        load = [0] * threads
        for n, w in zip(g.nodes, owners):
            load[w] += node_cost(g, n)
        biggest = max(node_cost(g, n) for n in g.nodes)
        assert max(load) <= sum(load) / threads + biggest, (threads, load)


@pytest.mark.parametrize("model", ["list-rnn", "ggsnn-qm9"])
def test_evaluation_native_bit_exact(model: str) -> None:
    """Evaluation on the native engine: the numpy evaluation's loss and metric (accuracy; the
    GGSNN's MAE through its records) bit for bit, its keys taken as numpy takes them, and
    ``api.evaluate`` leaves the trainer's keys alone."""
    spec, splits = small(model, 48)
    a, b = Trainer(spec, config(), splits), NativeTrainer(spec, config(), splits)
    a.train_epoch(), b.train_epoch()
    assert a.evaluate(splits.val) == b.evaluate(splits.val)
    assert a.next_key == b.next_key
    a.train_epoch(), b.train_epoch()  # training goes on after the evaluation's keys
    assert_same_state(a, b)
    key = b.next_key
    assert api.evaluate(b, splits.test) == a.evaluate(splits.test) and b.next_key == key


def test_cli_trains_checkpoints_and_resumes_on_native(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The command line end to end on the native backend: the progress bar, the summary, a
    checkpoint, and a resumed run that extends it with the first epoch carried over."""
    import json

    from amp_hls.cli import main

    j, c = tmp_path / "run.json", tmp_path / "run.npz"
    argv = ["train", "mlp", "--backend", "native", "--epochs", "1", "--no-target",
            "--json", str(j), "--checkpoint", str(c)]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "epoch 1/1" in captured.err and "conservation ok" in captured.out
    doc = json.loads(j.read_text())
    assert doc["backend"] == "native" and doc["conservation_ok"] and len(doc["history"]) == 1
    j2 = tmp_path / "resumed.json"
    assert main(["train", "mlp", "--backend", "native", "--resume", str(c), "--epochs", "2", "--quiet",
                 "--json", str(j2)]) == 0
    capsys.readouterr()
    doc2 = json.loads(j2.read_text())
    assert doc2["backend"] == "native" and [r["epoch"] for r in doc2["history"]] == [1, 2]
    assert doc2["history"][0] == doc["history"][0] and doc2["instances"] == 2 * doc["instances"]
