"""Checkpoints that cannot be poisoned or hijacked (amp_hls/checkpoint.py, amp_hls/runtime/restore.py):
written through a temporary file created exclusively in the target's directory, never through a
symlink; read only when every array's name, shape, dtype and finiteness and every counter is
what the trainer expects; any damage an AmpHlsError naming the file."""

from __future__ import annotations

import io
import json
import os
import zipfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amp_hls.checkpoint import read_checkpoint, write_checkpoint
from amp_hls.datasets import Splits
from amp_hls.errors import AmpHlsError
from amp_hls.models import MODELS
from amp_hls.runtime.trainer import TrainConfig, Trainer

MLP = MODELS["mlp"]


@pytest.fixture(scope="module")
def splits() -> Splits:
    full = MLP.splits(0)
    return Splits(full.name, full.train[:40], full.val[:10], full.test[:10])


@pytest.fixture(scope="module")
def saved(splits, tmp_path_factory) -> tuple[dict[str, np.ndarray], dict]:
    """A real checkpoint of a trainer mid-run (Adam moments, gradients pending below muf)."""
    trainer = Trainer(MLP, TrainConfig(epochs=2, muf=9, mak=4), splits)
    trainer.fit()
    assert any(k.n_grads for k in trainer.param_kernels)  # pending gradients are part of it
    path = tmp_path_factory.mktemp("ckpt") / "good.npz"
    trainer.save(path)
    return read_checkpoint(path)


def _write(path, arrays, meta) -> None:
    """A checkpoint file holding exactly ``arrays`` and ``meta`` (what a hostile file could)."""
    np.savez(path, **arrays, meta=np.array(json.dumps(meta)))


def _resume(path, splits) -> Trainer:
    return Trainer.resume(MLP, path, splits=splits)


def test_the_good_checkpoint_resumes(saved, splits, tmp_path):
    arrays, meta = saved
    _write(tmp_path / "c.npz", arrays, meta)
    trainer = _resume(tmp_path / "c.npz", splits)
    assert trainer.epoch == meta["epoch"] and trainer.optimizer.steps == meta["optimizer_steps"]


# name, change to the arrays/meta, what the message must say
POISONS = [
    ("nan weight", lambda a, m: a.__setitem__("param/fc0/weight", a["param/fc0/weight"] * np.nan), "holds NaN or inf"),
    ("inf moment", lambda a, m: a.__setitem__("opt/head/bias.m", a["opt/head/bias.m"] + np.inf), "holds NaN or inf"),
    ("wrong-shape gradient", lambda a, m: a.__setitem__("grad/head/weight", a["grad/head/weight"][:, :3]), "has shape"),
    ("wrong-shape moment", lambda a, m: a.__setitem__("opt/fc0/weight.v", a["opt/fc0/weight.v"].T), "has shape"),
    ("integer weight", lambda a, m: a.__setitem__("param/head/bias", a["param/head/bias"].astype(np.int64)), "expected floats"),
    ("negative second moment", lambda a, m: a.__setitem__("opt/head/weight.v", -a["opt/head/weight.v"] - 1), "negative"),
    ("missing weight", lambda a, m: a.pop("param/head/weight"), "has no array 'param/head/weight'"),
    ("missing moment", lambda a, m: a.pop("opt/fc0/bias.m"), "has no array 'opt/fc0/bias.m'"),
    ("unknown array", lambda a, m: a.__setitem__("param/ghost/weight", np.zeros(3)), "unexpected array"),
    ("steps -1", lambda a, m: m["optimizer_steps"].__setitem__("head", -1), "'optimizer_steps'['head'] is -1"),
    ("steps for a stranger", lambda a, m: m["optimizer_steps"].__setitem__("ghost", 3), "optimizer_steps"),
    ("steps as text", lambda a, m: m["optimizer_steps"].__setitem__("fc0", "12"), "not an integer"),
    ("epoch -1", lambda a, m: m.__setitem__("epoch", -1), "'epoch' is -1"),
    ("epoch as a float", lambda a, m: m.__setitem__("epoch", 1.5), "'epoch' is 1.5"),
    ("n_grads at muf", lambda a, m: m["n_grads"].__setitem__("fc0", 9), "'n_grads'['fc0'] is 9, not an integer in [0, 8]"),
    ("version missing", lambda a, m: m["versions"].pop("head"), "'versions' names"),
    ("key beyond the key space", lambda a, m: m.__setitem__("next_key", 1 << 40), "'next_key'"),
    ("negative wall time", lambda a, m: m.__setitem__("train_s", -2.0), "'train_s'"),
    ("broken rng", lambda a, m: m.__setitem__("rng", {"bit_generator": "PCG64", "state": 3}), "random generator"),
    ("history record", lambda a, m: m["history"][0].__setitem__("wall_s", float("inf")), "history record 0"),
    ("history as text", lambda a, m: m.__setitem__("history", "none"), "'history'"),
    ("settings", lambda a, m: m["config"].__setitem__("mak", 0), "training settings"),
    ("unknown setting", lambda a, m: m["config"].__setitem__("warp", 9), "training settings"),
]


@pytest.mark.parametrize("name, poison, message", POISONS, ids=[p[0] for p in POISONS])
def test_a_poisoned_checkpoint_is_refused_naming_the_entry(saved, splits, tmp_path, name, poison, message):
    arrays = {k: v.copy() for k, v in saved[0].items()}
    meta = json.loads(json.dumps(saved[1]))
    poison(arrays, meta)
    path = tmp_path / "poisoned.npz"
    _write(path, arrays, meta)
    with pytest.raises(AmpHlsError, match=f"checkpoint {path}") as info:
        _resume(path, splits)
    assert message in str(info.value), str(info.value)


def _zip(path, entries: dict[str, bytes], compression=zipfile.ZIP_STORED) -> None:
    with zipfile.ZipFile(path, "w", compression) as z:
        for name, data in entries.items():
            z.writestr(name, data)


def _npy(value: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, value, allow_pickle=True)
    return buf.getvalue()


def test_what_write_checkpoint_never_writes_is_refused_before_loading(saved, tmp_path):
    meta = _npy(np.array(json.dumps(saved[1])))
    cases = {
        "pickle": {"meta.npy": meta, "param/fc0/weight.npy": _npy(np.array([object()], dtype=object))},
        "compressed": {"meta.npy": meta},
        "not an array": {"meta.npy": meta, "notes.txt": b"hello"},
    }
    for name, entries in cases.items():
        _zip(tmp_path / f"{name}.npz", entries, zipfile.ZIP_DEFLATED if name == "compressed" else zipfile.ZIP_STORED)
        with pytest.raises(AmpHlsError, match="cannot read checkpoint"):
            read_checkpoint(tmp_path / f"{name}.npz")
    # a header declaring 2**40 floats in a 200-byte entry: refused, not allocated
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": (1 << 40,)})
    _zip(tmp_path / "bomb.npz", {"meta.npy": meta, "param/fc0/weight.npy": header.getvalue() + b"\0" * 64})
    with pytest.raises(AmpHlsError, match="declares more data than it holds"):
        read_checkpoint(tmp_path / "bomb.npz")


def test_writing_never_follows_a_planted_symlink(saved, tmp_path):
    arrays, meta = saved
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    target = tmp_path / "run.npz"
    # the old predictable temporary name, and the target itself, planted as links to the victim
    (tmp_path / "run.npz.tmp.npz").symlink_to(victim)
    target.symlink_to(victim)
    write_checkpoint(target, arrays, meta)
    assert victim.read_text() == "precious"
    assert target.is_file() and not target.is_symlink()
    assert read_checkpoint(target)[1] == json.loads(json.dumps(meta))
    assert sorted(os.listdir(tmp_path)) == ["run.npz", "run.npz.tmp.npz", "victim.txt"]  # no temp left


def test_a_failed_write_leaves_the_old_checkpoint_and_no_temporary(saved, tmp_path):
    arrays, meta = saved
    target = tmp_path / "run.npz"
    write_checkpoint(target, arrays, meta)
    before = target.read_bytes()
    with pytest.raises(TypeError):
        write_checkpoint(target, arrays, {**meta, "bad": object()})  # not JSON: fails mid-write
    assert target.read_bytes() == before and os.listdir(tmp_path) == ["run.npz"]
    with pytest.raises(AmpHlsError, match="cannot write checkpoint"):
        write_checkpoint(tmp_path / "run.npz" / "inside.npz", arrays, meta)  # under a file


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_randomly_damaged_checkpoint_files_resume_or_refuse(saved, splits, tmp_path, data):
    # bytes of a real checkpoint, flipped, cut or extended at random: resume succeeds, or raises
    # an AmpHlsError; never another exception, never a hang
    arrays, meta = saved
    good = tmp_path / "good.npz"
    write_checkpoint(good, arrays, meta)
    raw = bytearray(good.read_bytes())
    for _ in range(data.draw(st.integers(1, 4))):
        how = data.draw(st.sampled_from(["flip", "cut", "append", "zero"]))
        at = data.draw(st.integers(0, len(raw) - 1))
        if how == "flip":
            raw[at] ^= data.draw(st.integers(1, 255))
        elif how == "cut":
            del raw[at:]
            if not raw:
                break
        elif how == "append":
            raw += data.draw(st.binary(min_size=1, max_size=64))
        else:
            raw[at:at + 8] = bytes(len(raw[at:at + 8]))
    damaged = tmp_path / "damaged.npz"
    damaged.write_bytes(bytes(raw))
    try:
        trainer = _resume(damaged, splits)
    except AmpHlsError:
        return
    # it passed every check: what it holds is sane
    assert all(np.all(np.isfinite(v)) for k in trainer.param_kernels for v in k.params.values())


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats()
                           | st.text(max_size=5), lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=6)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_entries_and_counters_resume_or_refuse(saved, splits, tmp_path, data):
    arrays = {k: v.copy() for k, v in saved[0].items()}
    meta = json.loads(json.dumps(saved[1]))
    if data.draw(st.booleans()):  # an array replaced by another of random shape, dtype and values
        name = data.draw(st.sampled_from(sorted(arrays)))
        shape = data.draw(st.lists(st.integers(0, 5), max_size=3).map(tuple))
        dtype = data.draw(st.sampled_from([np.float32, np.float64, np.int64, np.bool_]))
        value = data.draw(st.sampled_from([0.0, 1.0, -1.0, np.nan, np.inf, 1e30]))
        arrays[name] = np.full(shape, value).astype(dtype) if np.isfinite(value) or dtype in (np.float32, np.float64) \
            else np.zeros(shape, dtype)
    else:  # a metadata entry (or one inside it) replaced by random JSON
        key = data.draw(st.sampled_from(sorted(meta)))
        if isinstance(meta[key], dict) and meta[key] and data.draw(st.booleans()):
            inner = data.draw(st.sampled_from(sorted(meta[key])))
            meta[key][inner] = data.draw(JSON_VALUES)
        else:
            meta[key] = data.draw(JSON_VALUES)
    path = tmp_path / "random.npz"
    _write(path, arrays, meta)
    try:
        trainer = _resume(path, splits)
    except AmpHlsError:
        return
    assert all(np.all(np.isfinite(v)) for k in trainer.param_kernels for v in k.params.values())
    assert trainer.epoch >= 0 and all(s >= 0 for s in trainer.optimizer.steps.values())
