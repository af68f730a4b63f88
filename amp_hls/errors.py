"""The project's exception types: one per contract, so callers can tell bad input from bugs."""

import unicodedata


class AmpHlsError(Exception):
    """Base class of every error amp-hls raises on purpose."""


class IRError(AmpHlsError):
    """A graph (built in Python or read from JSON) breaks the IR contract.

    The message names the node and, where it applies, the port: ``node 'fc1' port in0: ...``.
    """

    def __init__(self, message: str, node: str | None = None, port: str | None = None):
        self.node = node
        self.port = port
        where = ""
        if node is not None:
            where = f"node '{node}'" + (f" port {port}" if port is not None else "") + ": "
        super().__init__(where + message)


class WireError(AmpHlsError):
    """Bytes or beats that are not a well-formed message stream (docs/contracts.md, Wire format)."""


class NumericsError(AmpHlsError):
    """An invalid precision or a value the numeric model cannot represent (NaN, inf)."""


class NonFiniteError(NumericsError):
    """A loss, gradient or parameter became NaN or inf: training diverged. ``node`` is where it
    was first seen (the loss node, or the parameter node whose update it was)."""

    def __init__(self, message: str, node: str):
        self.node = node
        super().__init__(f"node '{node}': {message}")


class KernelError(AmpHlsError):
    """A message a node kernel cannot process (wrong shape, unknown tag on a backward)."""


# What a process exits with (the CLI and each rank of a distributed job; docs/distributed.md
# adds the codes of a lost rank).
EXIT_ERROR = 1  # an unexpected error, with its traceback: Python's own code for one
EXIT_BAD_INPUT = 2  # an AmpHlsError, said in one line
EXIT_INTERRUPTED = 130  # SIGINT, as a shell reports it


def exit_code(exc: BaseException) -> int:
    """The exit code for a command that ended with ``exc``."""
    if isinstance(exc, AmpHlsError):
        return EXIT_BAD_INPUT
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    return EXIT_ERROR


def escape_controls(text: str) -> str:
    """``text`` with every control character but newline and tab written as an escape, so that
    a message quoting user input (a node name, a file's content) cannot drive the terminal."""
    return "".join(ch if ch in "\n\t" or unicodedata.category(ch) != "Cc" else repr(ch)[1:-1] for ch in text)
