"""Per-node optimizers: SGD, momentum and Adam against reference implementations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from amp_hls.errors import AmpHlsError
from amp_hls.runtime import Optimizer, OptimizerConfig
from amp_hls.runtime.optim import OPTIMIZERS

STEPS = 6


def _random_node(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Parameters of random shapes, as one Linear node (weight + bias) would hold them."""
    n_out, n_in = (int(v) for v in rng.integers(1, 7, 2))
    return {"weight": rng.normal(size=(n_out, n_in)), "bias": rng.normal(size=n_out)}


def _grads_like(params: dict[str, np.ndarray], rng: np.random.Generator, scale: float = 1.0):
    return {k: rng.normal(scale=scale, size=v.shape) for k, v in params.items()}


class Reference:
    """Textbook optimizers, written independently of amp_hls (no clipping)."""

    def __init__(self, kind: str, lr: float, momentum=0.9, beta1=0.9, beta2=0.999, eps=1e-8):
        self.kind, self.lr, self.mu, self.b1, self.b2, self.eps = kind, lr, momentum, beta1, beta2, eps
        self.t = 0
        self.m: dict[str, np.ndarray] = {}
        self.v: dict[str, np.ndarray] = {}

    def step(self, params, grads):
        self.t += 1
        out = {}
        for k, p in params.items():
            g = grads[k]
            if self.kind == "sgd":
                out[k] = p - self.lr * g
            elif self.kind == "momentum":
                self.v[k] = self.mu * self.v.get(k, 0.0) + g
                out[k] = p - self.lr * self.v[k]
            else:
                self.m[k] = self.b1 * self.m.get(k, 0.0) + (1.0 - self.b1) * g
                self.v[k] = self.b2 * self.v.get(k, 0.0) + (1.0 - self.b2) * np.square(g)
                m_hat = self.m[k] / (1.0 - self.b1**self.t)
                v_hat = self.v[k] / (1.0 - self.b2**self.t)
                out[k] = p - self.lr * m_hat / (np.sqrt(v_hat) + self.eps)
        return out


def _close(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == np.float64
        np.testing.assert_allclose(a[k], b[k], rtol=1e-12, atol=1e-14, err_msg=k)


@pytest.mark.parametrize("kind", OPTIMIZERS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_reference_over_several_steps(kind, seed):
    rng = np.random.default_rng(seed)
    lr = float(rng.uniform(1e-3, 1e-1))
    opt = Optimizer(OptimizerConfig(kind, lr=lr, clip=None))
    ref = Reference(kind, lr)
    params = _random_node(rng)
    expected = {k: v.copy() for k, v in params.items()}
    for _ in range(STEPS):
        grads = _grads_like(params, rng)
        params = opt.step("fc", params, grads)
        expected = ref.step(expected, grads)
        _close(params, expected)
    assert opt.steps == {"fc": STEPS}


def test_step_does_not_modify_its_inputs():
    rng = np.random.default_rng(3)
    params = _random_node(rng)
    grads = _grads_like(params, rng)
    before_p = {k: v.copy() for k, v in params.items()}
    before_g = {k: v.copy() for k, v in grads.items()}
    Optimizer(OptimizerConfig("adam", lr=0.1, clip=0.1)).step("fc", params, grads)
    for k in params:
        np.testing.assert_array_equal(params[k], before_p[k])
        np.testing.assert_array_equal(grads[k], before_g[k])


def test_step_keeps_the_parameter_dtype():
    params = {"weight": np.ones((2, 3), dtype=np.float32)}
    new = Optimizer(OptimizerConfig("sgd", lr=0.5)).step("fc", params, {"weight": np.ones((2, 3))})
    assert new["weight"].dtype == np.float32
    np.testing.assert_array_equal(new["weight"], np.full((2, 3), 0.5, dtype=np.float32))


def test_adam_first_step_moves_each_weight_by_lr_times_sign():
    rng = np.random.default_rng(4)
    lr = 0.01
    params = _random_node(rng)
    # |g| well above eps, of wildly different magnitudes: the bias-corrected step ignores them.
    grads = {k: rng.choice([-1, 1], v.shape) * 10.0 ** rng.uniform(-3, 2, v.shape)
             for k, v in params.items()}
    new = Optimizer(OptimizerConfig("adam", lr=lr, clip=None)).step("fc", params, grads)
    for k in params:
        np.testing.assert_allclose(params[k] - new[k], lr * np.sign(grads[k]), rtol=1e-4)


@pytest.mark.parametrize("t", [1, 2, 3, 4, 5])
def test_adam_bias_correction_at_each_of_the_first_steps(t):
    """With a constant gradient, m_hat = g and v_hat = g^2 at every step (exactly, in reals), so
    every step moves by lr * sign(g); without correction step 1 would move ~3.2 lr."""
    rng = np.random.default_rng(5)
    lr = 0.01
    params = _random_node(rng)
    grads = {k: rng.choice([-1, 1], v.shape) * rng.uniform(0.1, 3.0, v.shape) for k, v in params.items()}
    opt = Optimizer(OptimizerConfig("adam", lr=lr, clip=None))
    for _ in range(t - 1):
        params = opt.step("fc", params, grads)
    new = opt.step("fc", params, grads)
    assert opt.steps["fc"] == t
    for k in params:
        np.testing.assert_allclose(params[k] - new[k], lr * np.sign(grads[k]), rtol=1e-6)


@pytest.mark.parametrize("t", [1, 2, 3, 4, 5])
def test_adam_bias_correction_with_changing_gradients(t):
    """Against the closed form: m_t = (1-b1) sum b1^(t-i) g_i, v_t likewise, corrected by 1-b^t."""
    rng = np.random.default_rng(10 + t)
    lr, b1, b2, eps = 0.05, 0.9, 0.999, 1e-8
    p0 = {"w": rng.normal(size=(3, 4))}
    gs = [{"w": rng.normal(size=(3, 4))} for _ in range(t)]
    opt = Optimizer(OptimizerConfig("adam", lr=lr, clip=None))
    params = p0
    for i in range(t):
        before = params
        params = opt.step("n", params, gs[i])
    m = (1 - b1) * sum(b1 ** (t - 1 - i) * gs[i]["w"] for i in range(t))
    v = (1 - b2) * sum(b2 ** (t - 1 - i) * gs[i]["w"] ** 2 for i in range(t))
    step = lr * (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
    np.testing.assert_allclose(before["w"] - params["w"], step, rtol=1e-9)


def test_step_counts_and_bias_correction_are_per_node():
    rng = np.random.default_rng(6)
    lr = 0.01
    a0, b = _random_node(rng), _random_node(rng)
    grads_a = [_grads_like(a0, rng) for _ in range(3)]
    grads_b = _grads_like(b, rng)
    opt = Optimizer(OptimizerConfig("adam", lr=lr, clip=None))
    a = a0
    for g in grads_a:
        a = opt.step("a", a, g)
    new_b = opt.step("b", b, grads_b)
    assert opt.steps == {"a": 3, "b": 1}
    # b's first step is a first step: the same as on a fresh optimizer, ~lr * sign(g)
    fresh = Optimizer(OptimizerConfig("adam", lr=lr, clip=None)).step("b", b, grads_b)
    for k in b:
        np.testing.assert_array_equal(new_b[k], fresh[k])
        np.testing.assert_allclose(b[k] - new_b[k], lr * np.sign(grads_b[k]), rtol=1e-4)
    # and a, stepped 3 times, matches the reference at t = 3 (b's step did not count for it)
    ref, expected = Reference("adam", lr), a0
    for g in grads_a:
        expected = ref.step(expected, g)
    _close(a, expected)
    g4 = _grads_like(a0, rng)
    _close(opt.step("a", a, g4), ref.step(expected, g4))  # t = 4 for a, not 5
    assert opt.steps == {"a": 4, "b": 1}


@pytest.mark.parametrize("kind", OPTIMIZERS)
def test_momentum_state_is_per_node(kind):
    rng = np.random.default_rng(7)
    params = _random_node(rng)
    g1, g2 = _grads_like(params, rng), _grads_like(params, rng)
    shared = Optimizer(OptimizerConfig(kind, lr=0.1, clip=None))
    shared.step("x", params, g1)
    shared.step("x", params, g1)
    alone = Optimizer(OptimizerConfig(kind, lr=0.1, clip=None))
    _close(shared.step("y", params, g2), alone.step("y", params, g2))


def _norm(d: dict[str, np.ndarray]) -> float:
    return math.sqrt(sum(float(np.sum(v * v)) for v in d.values()))


def test_clipping_scales_a_large_gradient_to_exactly_clip():
    rng = np.random.default_rng(8)
    params = _random_node(rng)
    grads = _grads_like(params, rng, scale=10.0)
    clip, lr = 0.5, 0.1
    assert _norm(grads) > clip
    new = Optimizer(OptimizerConfig("sgd", lr=lr, clip=clip)).step("fc", params, grads)
    applied = {k: (params[k] - new[k]) / lr for k in params}
    assert _norm(applied) == pytest.approx(clip, rel=1e-12)  # the node's whole norm, not per tensor
    scale = clip / _norm(grads)
    for k in params:
        np.testing.assert_allclose(applied[k], grads[k] * scale, rtol=1e-10)


def test_clipping_leaves_a_small_gradient_untouched():
    rng = np.random.default_rng(9)
    params = _random_node(rng)
    grads = _grads_like(params, rng, scale=1e-3)
    assert _norm(grads) < 1.0
    lr = 0.1
    clipped = Optimizer(OptimizerConfig("sgd", lr=lr, clip=1.0)).step("fc", params, grads)
    ref = Reference("sgd", lr).step(params, grads)
    for k in params:
        np.testing.assert_array_equal(clipped[k], ref[k])


def test_clip_none_turns_clipping_off():
    rng = np.random.default_rng(10)
    params = _random_node(rng)
    grads = _grads_like(params, rng, scale=1e3)
    lr = 1e-3
    new = Optimizer(OptimizerConfig("sgd", lr=lr, clip=None)).step("fc", params, grads)
    _close(new, Reference("sgd", lr).step(params, grads))


def test_clipping_happens_before_adam_moments():
    """Adam sees the clipped gradient: with momentum state it matters what was stored."""
    rng = np.random.default_rng(11)
    params = _random_node(rng)
    gs = [_grads_like(params, rng, scale=s) for s in (100.0, 0.01, 1.0)]
    clip, lr = 1.0, 0.01
    opt = Optimizer(OptimizerConfig("adam", lr=lr, clip=clip))
    ref = Reference("adam", lr)
    expected = params
    for g in gs:
        n = _norm(g)
        g_clipped = {k: v * (clip / n) for k, v in g.items()} if n > clip else g
        params = opt.step("fc", params, g)
        expected = ref.step(expected, g_clipped)
        _close(params, expected)


def test_default_config():
    c = OptimizerConfig()
    assert (c.kind, c.lr, c.beta1, c.beta2, c.eps, c.clip) == ("adam", 1e-3, 0.9, 0.999, 1e-8, 5.0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"kind": "rmsprop"},
        {"kind": "ADAM"},
        {"lr": 0.0},
        {"lr": -1e-3},
        {"lr": float("nan")},
        {"lr": float("inf")},
        {"momentum": 1.0},
        {"momentum": -0.1},
        {"beta1": 1.0},
        {"beta2": 1.0},
        {"beta1": -0.5},
        {"eps": 0.0},
        {"clip": 0.0},
        {"clip": -1.0},
    ],
)
def test_invalid_configs_raise(kwargs):
    with pytest.raises(AmpHlsError):
        OptimizerConfig(**kwargs)


@pytest.mark.parametrize("kind", OPTIMIZERS)
def test_state_round_trip_continues_identically(kind):
    rng = np.random.default_rng(12)
    nodes = {"fc0": _random_node(rng), "head": _random_node(rng)}
    config = OptimizerConfig(kind, lr=0.02, clip=2.0)
    opt = Optimizer(config)
    for i in range(3):
        for name in nodes if i != 1 else ["fc0"]:  # uneven step counts
            nodes[name] = opt.step(name, nodes[name], _grads_like(nodes[name], rng))
    arrays = opt.state_arrays()
    assert all(isinstance(v, np.ndarray) for v in arrays.values())
    if kind != "sgd":
        assert arrays and all(k.startswith("opt/") for k in arrays)
    # through an npz file with pickling off, as a checkpoint holds it
    import io

    buf = io.BytesIO()
    np.savez(buf, **arrays)
    buf.seek(0)
    with np.load(buf, allow_pickle=False) as data:
        loaded = {k: data[k] for k in data.files}
    restored = Optimizer(config)
    restored.load_state(loaded, dict(opt.steps))
    assert restored.steps == {"fc0": 3, "head": 2}
    a, b = dict(nodes), dict(nodes)
    for _ in range(3):
        for name in nodes:
            g = _grads_like(nodes[name], rng)
            a[name] = opt.step(name, a[name], g)
            b[name] = restored.step(name, b[name], g)
            for k in a[name]:
                np.testing.assert_array_equal(a[name][k], b[name][k])


def test_load_state_replaces_previous_state():
    rng = np.random.default_rng(13)
    p = _random_node(rng)
    opt = Optimizer(OptimizerConfig("adam", lr=0.1))
    opt.step("old", p, _grads_like(p, rng))
    opt.load_state({}, {})
    assert opt.state == {} and opt.steps == {}
    fresh = Optimizer(OptimizerConfig("adam", lr=0.1))
    g = _grads_like(p, rng)
    _close(opt.step("old", p, g), fresh.step("old", p, g))
