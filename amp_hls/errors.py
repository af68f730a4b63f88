"""The project's exception types: one per contract, so callers can tell bad input from bugs."""


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


class KernelError(AmpHlsError):
    """A message a node kernel cannot process (wrong shape, unknown tag on a backward)."""
