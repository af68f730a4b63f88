"""Cycle model of the RTL Linear kernel (templates/rtl/kernels/linear.sv.j2).

The kernel serves one message at a time: header and state beats, a tag look-up, the payload read
into RAM (packed into words of ``parallelism`` elements, at most one word and one beat a cycle),
then one pipelined loop per pass of ``parallelism`` MACs a cycle, the output beats leaving while it
runs. Above the input width the MACs hold ``outputs_per_step`` rows of W (``Linear.outputs_per_step``):
a word is then a whole input row and each loop walks groups of that many outputs. A backward runs two
loops (dx, then dW; only dW for a Linear fed by a host source, ``skip_dx``: design.skips_dx) and
every ``muf``-th one dumps G, one 64-bit element a cycle; the dump is shared out over the ``muf``
messages. The dW loop starts once the dx loop's last word is in the unpacker, its beats leaving
beside it; the dx has left once they are out (``passed_cycles``): the dW loop and the dump run
beside the kernels downstream, so they take the kernel's time but not the gradient's. With the
dump engine (``DeviceOptions.dump_engine``) the kernel only copies G into the dump buffer, a word a
cycle, and the dump streams out beside its loops (a dump due while the last still streams waits
for it: the host link, which carries every kernel's dumps, bounds that pace).
"""

from __future__ import annotations

from ..design import has_dump_engine
from ..errors import AmpHlsError
from ..ir import Linear
from ..wire import HEADER_BEATS, Kind, beats_per_row, elements_per_beat

LOOK = 1  # the tag look-up (or WEIGHTS check) after the header and state beats
PIPE = 4  # a loop's last issue to its last result: RAM read, multiply, accumulate, write
PIPE_OUT = PIPE + 1  # ... and, for forward and dx, the last beat through the unpacker
PACK = 1  # the packer's last word after the last beat
COPY = 3  # the dump engine's copy: the last word's write, the check that it is done, the start


def _shape(node: Linear) -> tuple[int, int, int]:
    """Lanes of an x word, MAC words per input row, and the output groups a loop walks."""
    return node.input_lanes, node.input_words, node.out_features // node.outputs_per_step


def _read(rows: int, beats: int, words: int, extra: int = 0) -> int:
    """``rows`` rows of ``beats`` beats in, packed into ``words`` words a row: one beat and one
    word a cycle; the last ``extra`` beats of a row (a bias alone) wait for the row's last word."""
    return rows * max(beats, words + extra)


# the parts a Linear's message cycles are made of (``message_parts``), with what the report calls them
PARTS = {
    "mac": "MAC steps",
    "stream": "payload read",
    "dump": "GRADS dumps",
    "fixed": "header, look-up and pipeline",
}


def format_shares(parts: dict[str, float]) -> str:
    """``MAC steps 47%, payload read 18%, ...``: each part's share of the whole; empty for none."""
    whole = sum(parts.values())
    return ", ".join(f"{PARTS[k]} {c / whole:.0%}" for k, c in parts.items()) if whole else ""


def message_parts(node: Linear, options, port: str, rows: int, skip_dx: bool = False) -> dict[str, float]:  # noqa: ANN001
    """Where ``message_cycles`` goes, in parts (``PARTS``) that add up to it before rounding:
    ``mac`` the loops' steps, every MAC busy; ``stream`` the payload's read the loops do not hide
    (its beats, or its words where a row packs into more words than it has beats, before the loops
    start; the unpacker's beats a dx loop waits for); ``dump`` a GRADS dump's
    share (the dump engine's copy, with it); ``fixed`` header, state, look-up, packer and
    pipeline latency. The MACs' share of a kernel's time is what more of them can shorten."""
    p = node.parallelism
    n_in, n_out = node.in_features, node.out_features
    _, words, groups = _shape(node)
    bpr_in = beats_per_row(Kind.DATA, n_in)
    head = HEADER_BEATS + LOOK
    if port == "params":
        pw = n_in + int(node.bias)
        bpr_w = beats_per_row(Kind.WEIGHTS, pw)
        return {"mac": 0, "stream": _read(n_out, bpr_w, words, bpr_w - bpr_in), "dump": 0, "fixed": head + PACK}
    if port == "in0":
        return {"mac": rows * groups * words, "stream": _read(rows, bpr_in, words), "dump": 0,
                "fixed": head + PACK + PIPE_OUT}
    if port == "out0_grad":
        parts: dict[str, float] = {**_dx_parts(node, rows, skip_dx), "dump": 0}
        dw = groups * words * rows  # the dW loop, started as the dx loop's last word is in the
        # unpacker: of the beats of that word still to leave, it hides what it outlasts
        drain = _dx_drain(node, skip_dx)
        parts["stream"] += max(0, drain - dw - PIPE) - drain
        parts["mac"] += dw
        parts["fixed"] += PIPE
        if has_dump_engine(p, options):  # the dump's beats are priced on the host link (report.link_beats)
            parts["dump"] = (groups * words + COPY) / options.muf
        else:
            parts["dump"] = (HEADER_BEATS + n_out * (n_in + int(node.bias)) + 2) / options.muf
        return parts
    raise AmpHlsError(f"linear node '{node.name}' has no input port {port!r}")


def message_cycles(node: Linear, in_specs, out_specs, options, port: str, rows: int,  # noqa: ANN001
                   skip_dx: bool = False) -> int:
    """Cycles between taking a message of ``rows`` rows on ``port`` and taking the next;
    ``skip_dx``: the kernel runs no dx loop (``NodeDesign.skip_dx``)."""
    return round(sum(message_parts(node, options, port, rows, skip_dx).values()))


def _dx_parts(node: Linear, rows: int, skip_dx: bool) -> dict[str, float]:
    """``message_parts`` of a backward message up to its dx's last beat out: header, state and
    look-up, the gradient rows in, then the dx loop (a word of results per output group,
    ``_shape``, leaving as a beat per 4 of them: fewer groups than beats wait for the beats) and
    the last word's beats; without a dx loop (``skip_dx``), up to the gradient read."""
    lanes, words, groups = _shape(node)
    parts = {"mac": 0, "stream": rows * beats_per_row(Kind.DATA, node.out_features), "fixed": HEADER_BEATS + LOOK}
    if not skip_dx:
        # a word lands after its groups' steps, or once the last one's beats are out if later
        steps = (rows * words - 1) * max(groups, -(-lanes // elements_per_beat(Kind.DATA))) + groups
        parts["mac"] = rows * words * groups
        parts["stream"] += steps - parts["mac"] + _dx_drain(node, skip_dx)
        parts["fixed"] += PIPE_OUT
    return parts


def _dx_drain(node: Linear, skip_dx: bool) -> int:
    """The beats of the dx's last word still to leave once the dx loop has ended, beyond the one
    ``PIPE_OUT`` counts: a word lands in the unpacker whole (``parallelism`` lanes, or what the
    row's last word holds) and leaves as a beat per 4 elements (64 lanes: 16 beats)."""
    if skip_dx:
        return 0
    return -(-node.last_word_lanes // elements_per_beat(Kind.DATA)) - 1


def _dx_passed(node: Linear, rows: int, skip_dx: bool) -> int:
    """A backward message's cycles up to its dx's last beat out (``_dx_parts``)."""
    return sum(_dx_parts(node, rows, skip_dx).values())


def passed_cycles(node: Linear, in_specs, out_specs, options, port: str, rows: int,  # noqa: ANN001
                  skip_dx: bool = False) -> int:
    """Cycles from taking a message on ``port`` to its output's last beat leaving: what the
    message spends on an instance's path. A backward's dx leaves before the dW loop (and any
    dump) runs, beside the kernels downstream; one with no dx (``skip_dx``) ends its path."""
    if port != "out0_grad" or skip_dx:
        return message_cycles(node, in_specs, out_specs, options, port, rows, skip_dx)
    return _dx_passed(node, rows, skip_dx)
