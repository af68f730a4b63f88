"""Build the generated C++ once per content (cached like the C simulation) and drive it: the
``NativeRun`` handle, whose arrays are numpy views of the library's own memory."""

from __future__ import annotations

import ctypes
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from .. import toolchain
from ..errors import AmpHlsError, KernelError, NonFiniteError
from ..ir import GraphCore
from ..numerics import NumericConfig
from ..runtime.optim import OPTIMIZERS, OptimizerConfig
from .codegen import NativeGraph, generate

# No -ffast-math and no FMA contraction: the float64 optimizer and the loss must round exactly
# as numpy does; -march=native lets the fixed-width loops vectorise, and -fno-math-errno lets
# sqrt vectorise (it changes no result, only whether errno is set).
CXXFLAGS = ("-std=c++17", "-O3", "-march=native", "-ffp-contract=off", "-fno-math-errno", "-fPIC", "-shared",
            "-Wall", "-Wextra", "-Werror")
CACHE_ENV = "AMP_HLS_NATIVE_CACHE"
# Worker threads: every wait fails the run after WAIT_TIMEOUT_S without progress (no message
# served anywhere while instances are in flight); an idle worker polls its mailboxes
# SPIN_ITERATIONS times (a pause each, some microseconds in all) before it sleeps; a mailbox
# holds MAILBOX_CAPACITY messages (a power of two; more wait with their sender).
WAIT_TIMEOUT_S = 60.0
SPIN_ITERATIONS = 4000
MAILBOX_CAPACITY = 1024
I64, F64 = ctypes.c_int64, ctypes.c_double
P = ctypes.c_void_p


class NativeBuildError(AmpHlsError):
    """g++ rejected the generated runtime; the message is the compiler's."""


class NativeThreadError(AmpHlsError):
    """The worker threads failed as a whole: no progress within the wait timeout (the message
    names what was waited for), or a worker that did not stop."""


def cache_dir() -> Path:
    """Where built runtimes are kept: ``$AMP_HLS_NATIVE_CACHE``, else ``~/.cache/amp-hls/native``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "amp-hls" / "native"


def build(native: NativeGraph, compiler: str = "g++", timeout: float = 600.0) -> Path:
    """The shared library of ``native``'s sources, compiled unless a build of the same content exists."""
    cxx = toolchain.require(compiler, NativeBuildError, f"the native backend needs a C++ compiler; {compiler!r} "
                            "was not found on PATH")
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix="src.") as tmp:
        src = Path(tmp)
        for name, text in native.sources.items():
            (src / name).write_text(text)
        files = [src / name for name in sorted(native.sources)]
        key = toolchain.build_key(files, cxx, *CXXFLAGS)

        def compile_(library: Path) -> None:
            cmd = [cxx, *CXXFLAGS, f"-I{src}", "-o", str(library), str(src / "graph.cpp")]
            result = toolchain.run_tool(cmd, timeout, NativeBuildError, f"g++ did not finish within {timeout:.0f} s")
            if result.returncode != 0:
                raise NativeBuildError(f"g++ failed to build the native runtime:\n{result.stderr.strip()}")

        return toolchain.cached_build(root / f"libamp_native_{key}.so", compile_)


_SIGNATURES: dict[str, tuple[object, list[object]]] = {
    "amp_new": (P, [ctypes.POINTER(F64)]),
    "amp_free": (None, [P]),
    "amp_error": (ctypes.c_char_p, [P]),
    "amp_error_kind": (ctypes.c_int, [P]),
    "amp_error_node": (ctypes.c_char_p, [P]),
    "amp_set_data": (ctypes.c_int, [P, ctypes.c_int, I64, P, P, P, P]),
    "amp_epoch_begin": (None, [P, P, I64]),
    "amp_epoch_run": (I64, [P, I64]),
    "amp_set_threads": (ctypes.c_int, [P, ctypes.c_int, P, P]),
    "amp_set_update_hook": (ctypes.c_int, [P, P]),
    "amp_inject_stall": (ctypes.c_int, [P, ctypes.c_int]),
    "amp_get_next_key": (ctypes.c_uint32, [P]),
    "amp_set_next_key": (None, [P, ctypes.c_uint32]),
    "amp_tensor": (P, [P, ctypes.c_int, ctypes.c_int, ctypes.c_int]),
    "amp_get_counters": (None, [P, ctypes.c_int, P]),
    "amp_set_counters": (None, [P, ctypes.c_int, P]),
    "amp_params_changed": (ctypes.c_int, [P, ctypes.c_int]),
    "amp_staleness": (I64, [P, ctypes.c_int, P, I64]),
    "amp_saturations": (ctypes.POINTER(I64), [P]),
    "amp_counts": (ctypes.POINTER(I64), [P]),
    "amp_node_ticks": (ctypes.POINTER(I64), [P]),
    "amp_pending": (I64, [P, ctypes.c_int]),
    "amp_waiting": (I64, [P]),
    "amp_active": (I64, [P]),
    "amp_stats": (None, [P, P]),
    "amp_records_size": (None, [P, ctypes.c_int, P]),
    "amp_records_take": (None, [P, ctypes.c_int, P, P, P, P, P, P]),
}
_LOADED: dict[Path, ctypes.CDLL] = {}
_HOOK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)


def load(path: Path) -> ctypes.CDLL:
    """The library at ``path`` with its signatures declared (loaded once per process)."""
    lib = _LOADED.get(path)
    if lib is None:
        lib = ctypes.CDLL(str(path))
        for name, (res, args) in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        _LOADED[path] = lib
    return lib


def _ptr(a: np.ndarray) -> int:
    return a.ctypes.data


class NativeRun:
    """One native engine of a graph: data, epochs, and views of its parameters and counters."""

    def __init__(self, graph: GraphCore, numerics: NumericConfig, optimizer: OptimizerConfig, *, mak: int,
                 muf: int, sync: bool, max_batch: int, train: bool = True):
        self.native = generate(graph, numerics)
        self.numerics = numerics
        self.lib = load(build(self.native))
        self.shapes = {n: graph.nodes[n].param_shapes() for n in self.native.param_nodes}
        o = optimizer
        cfg = np.array([max_batch, muf, mak, sync, train, OPTIMIZERS.index(o.kind), o.lr, o.momentum, o.beta1,
                        o.beta2, o.eps, o.clip if o.clip is not None else 0.0], dtype=np.float64)
        self.handle = self.lib.amp_new(cfg.ctypes.data_as(ctypes.POINTER(F64)))
        self.hook_error: BaseException | None = None
        self.wait_timeout = WAIT_TIMEOUT_S
        self._hook: object = None
        self.master_dtype = np.float64 if numerics.float_dtype == "float64" else np.float32
        self.grad_dtype = np.int64 if numerics.fixed else self.master_dtype

    def __del__(self) -> None:
        handle = getattr(self, "handle", None)
        if handle:
            self.lib.amp_free(handle)
            self.handle = None

    def check(self, rc: int) -> int:
        """``rc``, or the library's error raised as the numpy runtime raises it."""
        if rc >= 0:
            return rc
        if self.hook_error is not None:
            exc, self.hook_error = self.hook_error, None
            raise exc
        message = self.lib.amp_error(self.handle).decode()
        kind = self.lib.amp_error_kind(self.handle)
        if kind == 2:
            raise NonFiniteError(message, self.lib.amp_error_node(self.handle).decode())
        if kind == 3:
            raise NativeThreadError(message)
        raise KernelError(message)

    # data and epochs ------------------------------------------------------------------------------
    def set_data(self, source: int, rows: np.ndarray, offsets: np.ndarray, states: np.ndarray,
                 state_len: np.ndarray) -> None:
        rows = np.ascontiguousarray(rows, dtype=np.float64)
        offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        states = np.ascontiguousarray(states, dtype=np.uint16)
        state_len = np.ascontiguousarray(state_len, dtype=np.uint8)
        self.lib.amp_set_data(self.handle, source, len(state_len), _ptr(rows), _ptr(offsets), _ptr(states),
                              _ptr(state_len))

    def set_threads(self, threads: int, owners: list[int], timeout: float | None = None) -> None:
        """Run epochs on ``threads`` worker threads, node ``i`` owned by ``owners[i]`` (between
        epochs only); a run that makes no progress for ``timeout`` seconds (default: the last
        one given, at first ``WAIT_TIMEOUT_S``) fails with ``NativeThreadError``."""
        timeout = self.wait_timeout if timeout is None else timeout
        if not timeout > 0:
            raise AmpHlsError(f"the worker threads' wait timeout must be positive, got {timeout!r}")
        self.wait_timeout = timeout
        values = np.asarray(owners, dtype=np.intc)
        cfg = np.array([timeout, SPIN_ITERATIONS, MAILBOX_CAPACITY], dtype=np.float64)
        self.check(self.lib.amp_set_threads(self.handle, threads, _ptr(values), _ptr(cfg)))

    def set_update_hook(self, hook: Callable[[int], None] | None) -> None:
        """Async training hands each update to ``hook(param)`` instead of the native optimizer
        (one thread only); what it raises is raised by the ``epoch_run`` it interrupted."""
        if hook is None:
            self._hook = None
            self.check(self.lib.amp_set_update_hook(self.handle, None))
            return

        def call(param: int) -> int:
            try:
                hook(param)
            except BaseException as exc:  # noqa: BLE001 (kept, and raised past the C++ frames)
                self.hook_error = exc
                return 1
            return 0

        self._hook = _HOOK(call)  # kept alive as long as the library may call it
        if self.lib.amp_set_update_hook(self.handle, ctypes.cast(self._hook, P)) != 0:
            raise AmpHlsError("an update hook needs the native runtime on one thread")

    def inject_stall(self, worker: int) -> None:
        """Fault injection for tests: worker ``worker`` (not 0) stops serving its messages."""
        if self.lib.amp_inject_stall(self.handle, worker) != 0:
            raise AmpHlsError(f"no worker {worker} to stall (workers 1.. of a threaded run)")

    def epoch_begin(self, order: np.ndarray) -> None:
        order = np.ascontiguousarray(order, dtype=np.int64)
        self.lib.amp_epoch_begin(self.handle, _ptr(order), len(order))

    def epoch_run(self, budget: int) -> int:
        """Run on until ``budget`` more instances finished (or the epoch ended); how many did."""
        return self.check(self.lib.amp_epoch_run(self.handle, budget))

    @property
    def next_key(self) -> int:
        return int(self.lib.amp_get_next_key(self.handle))

    @next_key.setter
    def next_key(self, key: int) -> None:
        self.lib.amp_set_next_key(self.handle, key)

    # parameters ---------------------------------------------------------------------------------
    def tensor(self, param: int, name: str, what: int) -> np.ndarray:
        """A view of node ``param``'s tensor ``name``: 0 masters, 1 gradients, 2 and 3 the moments.
        After writing masters call ``params_changed``, after writing gradients ``set_counters``
        (the library then forgets its bound on them)."""
        node = self.native.param_nodes[param]
        shape = self.shapes[node][name]
        t = list(self.shapes[node]).index(name)
        dtype = (self.master_dtype, self.grad_dtype, np.float64, np.float64)[what]
        size = int(np.prod(shape))
        buf = (ctypes.c_char * (size * np.dtype(dtype).itemsize)).from_address(self.lib.amp_tensor(self.handle, param, t, what))
        return np.frombuffer(buf, dtype=dtype).reshape(shape)

    def counters(self, param: int) -> tuple[int, int, int]:
        """(version, n_grads, optimizer steps) of parameter node ``param``."""
        out = np.zeros(3, dtype=np.int64)
        self.lib.amp_get_counters(self.handle, param, _ptr(out))
        return int(out[0]), int(out[1]), int(out[2])

    def set_counters(self, param: int, version: int, n_grads: int, steps: int) -> None:
        values = np.array([version, n_grads, steps], dtype=np.int64)
        self.lib.amp_set_counters(self.handle, param, _ptr(values))

    def params_changed(self, param: int) -> None:
        """After writing node ``param``'s masters: its quantised weights (fixed) and other copies."""
        self.check(self.lib.amp_params_changed(self.handle, param))

    def staleness(self, param: int) -> np.ndarray:
        n = self.lib.amp_staleness(self.handle, param, None, 0)
        out = np.zeros(n, dtype=np.int64)
        self.lib.amp_staleness(self.handle, param, _ptr(out), n)
        return out

    # statistics ---------------------------------------------------------------------------------
    def saturations(self) -> dict[str, int]:
        counts = np.ctypeslib.as_array(self.lib.amp_saturations(self.handle), (len(self.native.sites),))
        return {s: int(c) for s, c in zip(self.native.sites, counts) if c}

    def node_counts(self) -> np.ndarray:
        """Per node: forward in, forward out, backward in, backward out."""
        return np.ctypeslib.as_array(self.lib.amp_counts(self.handle), (len(self.native.nodes), 4)).copy()

    def node_ticks(self) -> np.ndarray:
        """Per node: the time spent on it so far, in clock ticks (the time-stamp counter on x86):
        its steps (taking the batch, the kernel call, the optimizer step it triggers, routing what
        it emitted), for a source making its messages; the measured cost the partition weighs."""
        return np.ctypeslib.as_array(self.lib.amp_node_ticks(self.handle), (len(self.native.nodes),)).copy()

    def pending(self, node: int) -> int:
        return int(self.lib.amp_pending(self.handle, node))

    def waiting(self) -> int:
        return int(self.lib.amp_waiting(self.handle))

    def records(self, loss: int) -> tuple[np.ndarray, ...]:
        """Loss node ``loss``'s records since the last call: losses, correct (-1: not judged), rows
        per record, predictions and targets (real-valued rows, stacked), and in fixed point the
        LOSS words (loss, metric, rows) per record."""
        size = np.zeros(4, dtype=np.int64)
        self.lib.amp_records_size(self.handle, loss, _ptr(size))
        n, n_pred, n_target, n_words = (int(v) for v in size)
        loss_v, correct = np.zeros(n), np.zeros(n, dtype=np.int8)
        rows, pred, target = np.zeros(n, dtype=np.int64), np.zeros(n_pred), np.zeros(n_target)
        words = np.zeros(n_words, dtype=np.int64)
        self.lib.amp_records_take(self.handle, loss, _ptr(loss_v), _ptr(correct), _ptr(rows), _ptr(pred), _ptr(target),
                                  _ptr(words))
        return loss_v, correct, rows, pred, target, words.reshape(-1, 3)
