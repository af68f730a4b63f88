"""Where a design's streams wait, measured on rtlsim: ``amp-hls report --profile``.

The cycle model says how long each kernel should take; when rtlsim disagrees, the question is
which kernel held which. A profiling build wraps the project's ``amp_top`` in ``amp_profile``
(``templates/rtlsim/profile.sv.j2``), which counts on every stream's FIFO the beats in, the
cycles its writer waited for room, the cycles a beat waited for its reader, and the most beats
it held; the harness reads them off the wrapper's ``amp_counts`` port. The counters only read
the design (hierarchical references, simulation only), so it runs cycle for cycle as the plain
build does. A writer that waits long on a full FIFO is held by that FIFO's reader: found this
way, tree-rnn's phi ``node`` stalled compose's gradients whenever embed dumped its GRADS.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ..codegen.jinja import environment
from ..design import DeviceDesign

PROFILE_TOP = "amp_profile"  # the wrapper module
PROFILE_FILE = "amp_profile.sv"
COUNTERS = ("beats", "full", "held", "peak")  # per stream, lowest first (the template takes this order)
COUNTER_BITS = 64  # each counter's width on the port
WORD_BITS = 32  # what the harness copies the port in
COUNTER_WORDS = COUNTER_BITS // WORD_BITS


@dataclass(frozen=True)
class StreamProfile:
    """One stream's counters over a run (since the model's last reset)."""

    name: str
    writer: str  # kernel.port
    reader: str
    capacity: int  # beats its FIFO holds: 2**address bits, plus the output register
    beats: int  # beats through it
    full: int  # cycles its writer offered a beat the FIFO had no room for
    held: int  # cycles a beat waited at its output for the reader to take it
    peak: int  # the most beats it held at once


def render_profile_top(design: DeviceDesign, top: str) -> str:
    """``amp_profile``: ``top`` (the project's amp_top) with the counters on each of its streams."""
    links = [dict(name=link.name, src=str(link.src), dst=str(link.dst), aw=design.fifo_address_bits[link.name])
             for link in design.wiring.streams]
    return environment().get_template("rtlsim/profile.sv.j2").render(
        top=top, graph_name=design.graph.name, links=links, counters=COUNTERS, cb=COUNTER_BITS)


def write_profile_top(design: DeviceDesign, top: str, folder: Path) -> Path:
    """Write ``amp_profile.sv`` into ``folder`` (the project's build folder: it is no part of the
    project's RTL, and a rerun of the same design rewrites the same text)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / PROFILE_FILE
    text = render_profile_top(design, top)
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)
    return path


def decode_profile(design: DeviceDesign, words: Sequence[int]) -> list[StreamProfile]:
    """The counters of each stream of ``design`` from the port's 32-bit words (lowest first)."""
    per_stream = len(COUNTERS) * COUNTER_WORDS
    streams = design.wiring.streams
    if len(words) != per_stream * len(streams):
        raise ValueError(f"the profile amp_counts port holds {len(words)} words; {len(streams)} streams need {per_stream * len(streams)}")
    out = []
    for i, link in enumerate(streams):
        w = words[i * per_stream:(i + 1) * per_stream]
        values = [sum(w[k * COUNTER_WORDS + j] << (WORD_BITS * j) for j in range(COUNTER_WORDS))
                  for k in range(len(COUNTERS))]
        out.append(StreamProfile(link.name, str(link.src), str(link.dst), 2 ** design.fifo_address_bits[link.name] + 1,
                                 **dict(zip(COUNTERS, values, strict=True))))
    return out


def since(now: StreamProfile, before: StreamProfile) -> StreamProfile:
    """``now``'s counts less ``before``'s (the span between two reads of one run); the peak is the
    run's, which a span cannot take apart."""
    return replace(now, beats=now.beats - before.beats, full=now.full - before.full, held=now.held - before.held)


def format_profile(streams: Sequence[StreamProfile], cycles: int, limit: int = 12) -> str:
    """The streams whose writers waited longest (each wait is the reader's doing: busy, or itself
    waiting), with how full their FIFOs got; then how many streams never made a writer wait."""
    waited = sorted((s for s in streams if s.full), key=lambda s: (-s.full, s.name))
    lines = [f"stream profile over {cycles:,} cycles (rtlsim): writers that waited for room, longest first"]
    if not waited:
        lines.append("  no writer ever waited: every FIFO had room for every beat")
    for s in waited[:limit]:
        share = s.full / cycles if cycles else 0.0
        lines.append(f"  {s.name:<12} {s.writer} -> {s.reader}: waited {s.full:,} cycles ({share:.1%}), "
                     f"{s.beats:,} beats, held up to {s.peak:,} of {s.capacity:,}")
    if len(waited) > limit:
        lines.append(f"  ... and {len(waited) - limit} more streams whose writers waited")
    lines.append(f"  {len(streams) - len(waited)} of {len(streams)} streams never made their writer wait")
    return "\n".join(lines)
