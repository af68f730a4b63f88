"""A SIGINT while a checkpoint is written comes after the file is whole, and says what it holds."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

from amp_hls import checkpoint
from amp_hls.interrupts import interrupts_deferred


@pytest.fixture(autouse=True)
def python_sigint_handler():  # type: ignore[no-untyped-def]
    """Python's own SIGINT handler for each test, as in a shell's foreground: a suite started in the
    background without job control inherits SIGINT ignored, and these tests would see nothing."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _interrupt_self() -> None:
    os.kill(os.getpid(), signal.SIGINT)


def test_sigint_mid_write_is_delivered_once_the_checkpoint_is_in_place(tmp_path, monkeypatch):
    savez = np.savez

    def savez_interrupted(*args, **kwargs):
        _interrupt_self()  # as if the user pressed ^C while the arrays go out
        savez(*args, **kwargs)

    monkeypatch.setattr(checkpoint.np, "savez", savez_interrupted)
    path = tmp_path / "run.npz"
    with pytest.raises(KeyboardInterrupt):
        checkpoint.write_checkpoint(path, {"w": np.arange(4.0)}, {"epoch": 3})
    monkeypatch.undo()
    arrays, meta = checkpoint.read_checkpoint(path)
    assert meta == {"epoch": 3} and np.array_equal(arrays["w"], np.arange(4.0))
    assert sorted(os.listdir(tmp_path)) == ["run.npz"]  # no temporary left
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_nested_blocks_hold_the_interrupt_until_the_outer_one_ends():
    steps = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts_deferred():
            with interrupts_deferred():
                _interrupt_self()
                steps.append("inner")
            steps.append("outer")  # what the caller records of the write still happens
    assert steps == ["inner", "outer"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_ignored_interrupt_stays_ignored():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with interrupts_deferred():
            _interrupt_self()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
