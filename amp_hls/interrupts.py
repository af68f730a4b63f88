"""SIGINT held back while a file is written and its writer records what it wrote.

An interrupt raised between creating a checkpoint's temporary file and renaming it would leave the
temporary behind; one raised between the rename and the caller's note of it would make the
caller's "the checkpoint holds epoch N" false. Inside ``interrupts_deferred`` a SIGINT is only
noted; it is delivered (to whatever handler was there) when the block ends. Blocks nest: the
inner one hands a caught signal to the outer one's recorder.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers, and Python runs them only there
        return
    caught: list[FrameType | None] = []
    previous = signal.signal(signal.SIGINT, lambda _signum, frame: caught.append(frame))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            _deliver(previous, caught[0])


def _deliver(handler: object, frame: FrameType | None) -> None:
    if callable(handler):
        handler(signal.SIGINT, frame)
    elif handler == signal.SIG_DFL:
        signal.raise_signal(signal.SIGINT)
    # SIG_IGN, or a handler not set from Python (None): the signal would not have acted either
