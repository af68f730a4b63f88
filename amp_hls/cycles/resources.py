"""Resource model: LUT, FF, DSP, BRAM36 (and LUT-RAM) of each kernel of a device design, without
synthesising it, so that folding can price a candidate in microseconds (Yosys takes minutes).

Each kernel is described by a few features read off its rendered RTL (``codegen.rtl``, the very
text Yosys would get): a constant, the columns of its tag tables (``amp_tag_table``, a CAM in
LUT-RAM: SLOTS x ceil(TW / CW) columns of one LUT each, CW read off hw/rtl/amp_tag_table.sv, and
their AND trees; no tag flip-flops), its stream ports (a handshake each, and a branch of the
input select and output route), the Linear MAC lanes (``parallelism``) and element shifters
(``shift_kbits``: small below a beat, none at the wider parallelisms the folding picks), and its memories
(``amp_ram``, ``amp_rom``, and plain arrays), with their widths and depths evaluated from the
module's and ``amp_pkg``'s integer localparams. Each synchronous memory is placed as Yosys places
it, by cost: block RAM when fewer RAMB36 cost less than the LUT-RAM cells (``synth_xilinx``'s
``brams_xc4v``/``lutrams_xc5v`` costs: 257 per RAMB36, 8 per RAM32M/RAM64M), else distributed;
plain arrays are distributed. The kernel's resources are then linear in those features, with one
row of non-negative coefficients per node kind (``resource_coefficients.json``, data written by
``bench/calibrate_resources.py``, which synthesises a grid of small kernels with
``codegen.estimate`` and fits them: docs/board.md says how to rerun it when the RTL changes).
amp_top adds the boundary (``k_demux``, ``k_mux``, ``amp_control``) and one ``amp_fifo`` per stream,
priced the same way. An estimate of an estimate: ``amp-hls estimate`` synthesises the real thing.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from ..codegen.boards import Board
from ..design import DeviceDesign, DeviceOptions, StreamLink, fifo_address_bits, linear_aligned
from ..errors import AmpHlsError
from ..ir import Linear, node_lanes
from ..kinds import KINDS, device_kinds
from ..memories import in_block, in_lutram, in_uram, lutram_cost, uram_blocks
from ..resources import hw_dir, templates_dir
from ..wire import BEAT_BITS, Kind, elements_per_beat

COEFFICIENTS_FILE = Path(__file__).with_name("resource_coefficients.json")
COEFFICIENTS_SCHEMA = "amp-hls.resource-coefficients/2"  # /2: the "lut" rows price logic LUTs, LUT-RAM added
RESOURCES = ("lut", "ff", "dsp", "bram36", "lutram")  # the fitted ones; lutram: LUTs used as memory, part of lut
# (its "lut" row prices the logic LUTs alone: a kernel's LUT is that plus its LUT-RAM, so whatever adds
# LUT-RAM, a dump buffer or a deeper cache, adds LUTs, as it does in Yosys' and Vivado's counts)
# uram: URAM288 blocks, counted exactly off the memories' shapes (amp_hls.memories), not fitted
MEASURES = (*RESOURCES, "uram")
BOARD_RESOURCES = ("lut", "ff", "dsp", "bram36", "uram")  # the ones a board budgets (hw/boards/*.json)
LABELS = {"lut": "LUT", "ff": "FF", "dsp": "DSP", "bram36": "BRAM36", "lutram": "LUTRAM", "uram": "URAM"}
# one: a constant; tags: thousands (1024) of tag-table CAM columns; lanes: a Linear's MACs; shift: an
# unaligned Linear's element shifters (shift_kbits); kbits: kilobits of
# memory in LUT-RAM or flip-flops; akbits: those of plain arrays (read asynchronously, never in
# block RAM); bram: RAMB36 of the memories in block RAM; uram: URAM288 blocks of those in URAM
# (priced as themselves); routes: boundary routes; ports: a kernel's AXI-stream ports (a port's
# handshake and its branch of the input select / output route: a 7-copy broadcast has 16)
# shift: kilobit-stages of an unaligned Linear's element shifters (``shift_kbits``); rows: the lanes
# of a Linear that computes several outputs a step (``multi_row_lanes``); wide: a row-wise kernel's
# 64-bit beats a cycle beyond the first (its ``lanes`` - 1: wire.py, Lanes), or a converter's
FEATURES = ("one", "tags", "lanes", "shift", "rows", "wide", "kbits", "akbits", "bram", "uram", "routes", "ports")
# the features each resource is fitted on (a coefficient per feature and kind)
USES: dict[str, tuple[str, ...]] = {
    "lut": ("one", "tags", "lanes", "shift", "rows", "wide", "kbits", "routes", "ports"),
    "ff": ("one", "tags", "lanes", "wide", "akbits", "routes", "ports"),  # not kbits: a memory moving to block RAM
    # frees LUTs, and a fit on kbits would have the FFs drop with more slots
    "dsp": ("one", "lanes", "wide"),  # wide: a laned activation's or mul's multipliers
    "bram36": ("one", "bram"),
    "lutram": ("one", "tags", "kbits"),
}
PLACEMENTS = ("cost", "distributed")  # synchronous memories placed by cost, or all in LUT-RAM/FF
BOUNDARY = ("demux", "mux", "control", "fifo", "widen", "narrow")  # amp_top's parts besides the kernels
BRAM36_COST, BRAM18_COST, LUTRAM_CELL_COST = 257, 129, 8  # Yosys' memory_libmap costs (xc7)
# RAMB36 simple-dual-port shapes (width, depth) and RAMB18 ones (half a BRAM36 each)
_BRAM36_SHAPES = ((72, 512), (36, 1024), (18, 2048), (9, 4096), (4, 8192), (2, 16384), (1, 32768))
_BRAM18_SHAPES = ((36, 512), (18, 1024), (9, 2048), (4, 4096), (2, 8192), (1, 16384))


@dataclass(frozen=True)
class Memory:
    """One memory of a kernel: ``depth`` words of ``width`` bits."""

    name: str
    width: int
    depth: int
    sync: bool = True  # read synchronously (amp_ram, amp_rom): block RAM can hold it
    rom: bool = False  # an amp_rom: two read ports, initialised, so never in URAM (which cannot be)

    @property
    def reads(self) -> int:
        """Read ports: one block RAM serves two; LUT-RAM (or LUT logic) repeats its cells per port."""
        return 2 if self.rom else 1

    @property
    def bits(self) -> int:
        """Bits stored, once per read port (what LUT-RAM or flip-flops holding it would take)."""
        return self.width * self.depth * self.reads

    def _blocks(self) -> tuple[float, int]:
        """(BRAM36, cost) of the cheapest block-RAM shape; a RAMB18 counts half a BRAM36."""
        full = min(math.ceil(self.width / w) * math.ceil(self.depth / d) for w, d in _BRAM36_SHAPES)
        half = min(math.ceil(self.width / w) * math.ceil(self.depth / d) for w, d in _BRAM18_SHAPES)
        if half * BRAM18_COST < full * BRAM36_COST:
            return half * 0.5, half * BRAM18_COST
        return float(full), full * BRAM36_COST

    @property
    def bram36(self) -> float:
        return self._blocks()[0]

    @property
    def lutram_cells(self) -> int:
        """RAM32M (6 bits x 32) or RAM64M (3 bits x 64) cells, the cheaper, for every read port."""
        return self.reads * min(math.ceil(self.width / 6) * math.ceil(self.depth / 32),
                                math.ceil(self.width / 3) * math.ceil(self.depth / 64))

    @property
    def uram_blocks(self) -> int:
        return uram_blocks(self.width, self.depth)

    def in_uram(self, use_uram: bool) -> bool:
        """Whether the RTL marks it for URAM (amp_ram's and amp_fifo's rule, amp_hls.memories)."""
        return self.sync and not self.rom and in_uram(self.width, self.depth, use_uram)

    def in_bram(self, use_uram: bool = False) -> bool:
        """Whether it is in block RAM when its read is synchronous and it is not in URAM or moved
        to LUT-RAM (``split_moved``): on a board without URAM (``use_uram`` False) an amp_ram of at
        least ``BLOCK_MIN_BITS`` always (the RTL marks it, amp_hls.memories.in_block), any other
        by Yosys' cost rule."""
        if not self.rom and in_block(self.width, self.depth, use_uram, lutram_depth=0):  # moved ones: split_moved
            return True
        return self._blocks()[1] < self.lutram_cells * LUTRAM_CELL_COST


_INTEGER = re.compile(r"\blocalparam\s+integer\s+([^;]*);")
_ASSIGN = re.compile(r"^\s*([A-Za-z_]\w*)\s*=\s*(.+?)\s*$", re.S)
_INSTANCE = re.compile(r"\b(amp_ram|amp_rom|amp_tag_table)\s*#\s*\((.*?)\)\s*([A-Za-z_]\w*)\s*\(", re.S)
_PARAM = re.compile(r"\.([A-Za-z_]\w*)\s*\(")
_ARRAY = re.compile(r"^\s*reg\s+(?:signed\s+)?\[([^\]:]+):([^\]]+)\]\s*([A-Za-z_]\w*)\s*\[\s*0\s*:([^\]]+)\]\s*;", re.M)


def _eval(expr: str, env: Mapping[str, int]) -> int | None:
    """An integer SV constant expression of names in ``env``; None when it is not one."""
    text = expr.split("//")[0].replace("amp_pkg::", "").strip()
    if not re.fullmatch(r"[\w\s+\-*/%()<>?:]+", text) or "'" in text:
        return None
    try:
        value = eval(text.replace("/", "//"), {"__builtins__": {}}, dict(env))  # noqa: S307 - digits, names, operators
    except Exception:  # noqa: BLE001 - a name this reader does not know: not a constant it can use
        return None
    return int(value) if isinstance(value, (int, bool)) else None


def _localparams(text: str, env: dict[str, int]) -> dict[str, int]:
    """``env`` with the integer localparams ``text`` declares, in order."""
    for statement in _INTEGER.findall(text):
        for part in _split(statement):
            found = _ASSIGN.match(part)
            if found:
                value = _eval(found.group(2), env)
                if value is not None:
                    env[found.group(1)] = value
    return env


def _split(text: str) -> list[str]:
    """``text`` split at its top-level commas."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return [*parts, text[start:]]


@cache
def _package_env(numerics: Any) -> dict[str, int]:  # noqa: ANN401 - a NumericConfig (hashable)
    from ..codegen.rtl import render_package

    return _localparams(render_package(numerics), {})


@cache
def tag_table_chunk_bits() -> int:
    """The chunk width CW of amp_tag_table's CAM (its localparam, read off the module, defined
    there once): a table of SLOTS tags of TW bits has SLOTS * ceil(TW / CW) LUT-RAM columns."""
    found = _localparams((hw_dir() / "rtl" / "amp_tag_table.sv").read_text(), {}).get("CW")
    if not found:
        raise AmpHlsError("resource model: hw/rtl/amp_tag_table.sv declares no localparam integer CW")
    return found


@dataclass(frozen=True)
class KernelRtl:
    """What the model reads off one rendered kernel: its memories, its tag-table bits (SLOTS x
    TW) and the CAM columns those take (SLOTS x ceil(TW / CW))."""

    memories: tuple[Memory, ...]
    tag_bits: int
    tag_columns: int


def read_rtl(text: str, numerics: Any) -> KernelRtl:  # noqa: ANN401
    """The memories (amp_ram, amp_rom, arrays) and tag tables a rendered kernel instantiates;
    AmpHlsError when a size is not an integer constant this reader can evaluate."""
    env = _localparams(text, dict(_package_env(numerics)))
    mems, tags, columns = [], 0, 0
    for module, params, name in _INSTANCE.findall(text):
        values = {}
        for part in _split(params):
            found = _PARAM.match(part.strip())
            if found:
                values[found.group(1)] = part.strip()[found.end():].rstrip().removesuffix(")")
        want = {"amp_ram": ("W", "AW"), "amp_rom": ("W", "DEPTH"), "amp_tag_table": ("SLOTS", "TW")}[module]
        got = [_eval(values.get(k, ""), env) for k in want]
        if None in got:
            raise AmpHlsError(f"resource model: {module} {name}: {', '.join(f'{k}={values.get(k)!r}' for k in want)} "
                              "is not an integer constant")
        a, b = got  # type: ignore[misc]
        if module == "amp_tag_table":
            tags += a * b
            columns += a * -(-b // tag_table_chunk_bits())
        else:
            mems.append(Memory(name, a, 1 << b) if module == "amp_ram" else Memory(name, a, b, rom=True))
    for hi, lo, name, last in _ARRAY.findall(text):
        got = [_eval(x, env) for x in (hi, lo, last)]
        if None not in got:
            mems.append(Memory(name, got[0] - got[1] + 1, got[2] + 1, sync=False))  # type: ignore[operator]
    return KernelRtl(tuple(mems), tags, columns)


def memory_features(mems: list[Memory], placement: str, use_uram: bool = False) -> dict[str, float]:
    """``kbits``: kilobits in LUT-RAM or flip-flops; ``bram``: RAMB36 of the memories in block
    RAM (``placement`` "distributed": none, every memory in LUT-RAM or flip-flops); ``uram``:
    URAM288 blocks of those the RTL marks for URAM (``use_uram``: a board with some). The memories
    the RTL moves from block RAM to LUT-RAM are not among ``mems`` (``split_moved``)."""
    ultra = [m.in_uram(use_uram) for m in mems]
    blocks = [placement == "cost" and m.sync and m.in_bram(use_uram) and not u for m, u in zip(mems, ultra)]
    return {"kbits": sum(m.bits for m, b, u in zip(mems, blocks, ultra) if not b and not u) / 1024,
            "akbits": sum(m.bits for m in mems if not m.sync) / 1024,
            "bram": sum(m.bram36 for m, b in zip(mems, blocks) if b),
            "uram": float(sum(m.uram_blocks for m, u in zip(mems, ultra) if u))}


def split_moved(mems: Sequence[Memory], placement: str, options: DeviceOptions) -> tuple[list[Memory], list[Memory]]:
    """``mems`` as (kept, moved): moved, those that would be in block RAM but that the RTL marks
    for LUT-RAM (amp_ram's rule, amp_hls.memories). The fitted rows price the kept ones (a kind's
    own small LUT-RAM memories by their ``kbits``); the moved ones are priced by their cells
    (``lutram_price``), as Yosys maps them."""
    kept: list[Memory] = []
    moved: list[Memory] = []
    for m in mems:
        move = (placement == "cost" and m.sync and not m.rom and m.in_bram(options.use_uram)
                and in_lutram(m.width, m.depth, options.use_uram, options.lutram_depth))
        (moved if move else kept).append(m)
    return kept, moved


def lutram_price(mems: list[Memory]) -> Resources:
    """LUTs, LUT-RAM and flip-flops of memories in LUT-RAM (``amp_hls.memories.lutram_cost``)."""
    out = Resources()
    for m in mems:
        lut, lutram, ff = lutram_cost(m.width, m.depth)
        out = out + Resources(lut=lut, lutram=lutram, ff=ff)
    return out


def kernel_rtl(design: DeviceDesign, name: str) -> KernelRtl:
    from ..codegen.rtl import render_kernel

    return read_rtl(render_kernel(design, name), design.options.numerics)


def kernel_features(design: DeviceDesign, name: str, placement: str) -> dict[str, float]:
    """The features of one kernel of ``design`` (at its options and its nodes' parallelism)."""
    return _kernel_parts(design, name, placement)[0]


def _kernel_parts(design: DeviceDesign, name: str, placement: str) -> tuple[dict[str, float], list[Memory]]:
    """``kernel_features``, and the memories the RTL moves to LUT-RAM (left out of them)."""
    node = design.nodes[name].node
    found = kernel_rtl(design, name)
    kept, moved = split_moved(found.memories, placement, design.options)
    lanes = getattr(node, "parallelism", 0) if node.kind == "linear" else 0
    shift = shift_kbits(node.in_features, lanes) if node.kind == "linear" else 0.0  # type: ignore[attr-defined]
    rows = multi_row_lanes(node) if isinstance(node, Linear) else 0.0
    return {"one": 1.0, "tags": found.tag_columns / 1024, "lanes": float(lanes), "shift": shift, "rows": rows,
            "wide": float(node_lanes(node) - 1), "routes": 0.0,
            "ports": float(len(design.nodes[name].ports)),
            **memory_features(kept, placement, design.options.use_uram)}, moved


def multi_row_lanes(node: Linear) -> float:
    """The lanes of a Linear that computes several outputs a step (``Linear.outputs_per_step``),
    priced on top of ``lanes``: each also feeds one of Q adder trees and, in dx, the sum of its
    row's Q products (Yosys xc7: about 80 LUTs a lane more); 0 for one output a step."""
    return float(node.parallelism) if node.outputs_per_step > 1 else 0.0


def shift_kbits(in_features: int, parallelism: int) -> float:
    """The element shifters of a Linear whose beats do not land on whole groups of its words
    (``design.linear_aligned``), in kilobit-stages: its packer and unpacker each shift a buffer of
    P + epb - 1 elements by any of P offsets, log2 P stages of 2:1 multiplexers; 0 when aligned."""
    if linear_aligned(in_features, parallelism):
        return 0.0
    epb = elements_per_beat(Kind.DATA)
    return (parallelism + epb - 1) * (BEAT_BITS // epb) * (parallelism - 1).bit_length() / 1024


def fifo_memory(address_bits: int, lanes: int = 1) -> Memory:
    """One amp_fifo's entries: 2**address_bits words of {TLAST, TDATA} (``lanes`` beats wide),
    read synchronously."""
    return Memory("fifo", BEAT_BITS * lanes + 1, 1 << address_bits)


def fifo_features(address_bits: int, use_uram: bool = False, kept: bool = True, lanes: int = 1) -> dict[str, float]:
    """One amp_fifo (``fifo_memory``); ``kept`` False: its entries moved to LUT-RAM (``split_moved``)."""
    return {"one": 1.0, "tags": 0.0, "lanes": 0.0, "shift": 0.0, "rows": 0.0, "wide": 0.0, "routes": 0.0, "ports": 0.0,
            **memory_features([fifo_memory(address_bits, lanes)] if kept else [], "cost", use_uram)}


def boundary_features(routes: int = 0, wide: int = 0) -> dict[str, float]:
    """A part of amp_top besides kernels and FIFOs: the boundary (its ``routes``), or a lanes
    converter (amp_widen, amp_narrow) of ``wide`` + 1 beats."""
    return {"one": 1.0, "tags": 0.0, "lanes": 0.0, "shift": 0.0, "rows": 0.0, "wide": float(wide), "routes": float(routes),
            "ports": 0.0, "kbits": 0.0, "akbits": 0.0, "bram": 0.0, "uram": 0.0}


@dataclass(frozen=True)
class Row:
    """The fitted coefficients of one kind (or boundary part): resource -> feature -> coefficient."""

    coefficients: Mapping[str, Mapping[str, float]]
    placement: str = "cost"

    def price(self, features: Mapping[str, float]) -> Resources:
        fitted = {r: sum(c * features[f] for f, c in self.coefficients[r].items()) for r in RESOURCES}
        return Resources(**{**fitted, "lut": fitted["lut"] + fitted["lutram"]}, uram=features["uram"])


def fitted_count(counts: Mapping[str, float], r: str) -> float:
    """The part of a synthesis count ``counts[r]`` that a row's ``r`` coefficients price (what
    ``Row.price`` adds back): the LUTs without the LUT-RAM among them, every other count whole."""
    return counts["lut"] - counts["lutram"] if r == "lut" else counts[r]


@dataclass(frozen=True)
class Coefficients:
    """The coefficient file: one row per device kind and per boundary part, and how it was made."""

    kinds: Mapping[str, Row]
    boundary: Mapping[str, Row]
    meta: Mapping[str, Any] = field(default_factory=dict)


def row_from_json(doc: Any, where: str) -> Row:
    if not isinstance(doc, dict) or doc.get("placement", "cost") not in PLACEMENTS:
        raise AmpHlsError(f"resource coefficients: {where} is not a row (placement one of {', '.join(PLACEMENTS)})")
    coefficients = {}
    for r in RESOURCES:
        given = doc.get(r)
        if not isinstance(given, dict) or set(given) != set(USES[r]) or \
                not all(isinstance(v, (int, float)) and v >= 0 for v in given.values()):
            raise AmpHlsError(f"resource coefficients: {where}.{r} must give a non-negative number for each of "
                              f"{', '.join(USES[r])}")
        coefficients[r] = {f: float(v) for f, v in given.items()}
    return Row(coefficients, doc.get("placement", "cost"))


def row_to_json(row: Row) -> dict[str, Any]:
    return {"placement": row.placement, **{r: dict(row.coefficients[r]) for r in RESOURCES}}


def priced_kinds() -> tuple[str, ...]:
    """The device kinds with an RTL kernel (its template exists): the ones the model prices."""
    return tuple(k for k in device_kinds() if (templates_dir() / str(KINDS[k].rtl_template)).is_file())


def coefficients_from_json(doc: Any) -> Coefficients:
    """The coefficient file's contents, checked complete: every kind with an RTL kernel, every
    boundary part."""
    if not isinstance(doc, dict) or doc.get("schema") != COEFFICIENTS_SCHEMA:
        raise AmpHlsError(f"resource coefficients: not an {COEFFICIENTS_SCHEMA} document")
    kinds, boundary = doc.get("kinds", {}), doc.get("boundary", {})
    missing = [k for k in priced_kinds() if k not in kinds] + [b for b in BOUNDARY if b not in boundary]
    if missing:
        raise AmpHlsError(f"resource coefficients: no row for {', '.join(missing)}: rerun "
                          "python -m bench.calibrate_resources")
    return Coefficients({k: row_from_json(v, k) for k, v in kinds.items()},
                        {b: row_from_json(boundary[b], b) for b in BOUNDARY},
                        {k: v for k, v in doc.items() if k not in ("kinds", "boundary")})


@cache
def load_coefficients(path: Path = COEFFICIENTS_FILE) -> Coefficients:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise AmpHlsError(f"resource coefficients {path}: {exc}") from None
    return coefficients_from_json(doc)


@dataclass(frozen=True)
class Resources:
    lut: float = 0.0
    ff: float = 0.0
    dsp: float = 0.0
    bram36: float = 0.0
    lutram: float = 0.0
    uram: float = 0.0

    def __add__(self, other: Resources) -> Resources:
        return Resources(*(getattr(self, r) + getattr(other, r) for r in MEASURES))

    def __sub__(self, other: Resources) -> Resources:
        return Resources(*(getattr(self, r) - getattr(other, r) for r in MEASURES))

    def to_json(self) -> dict[str, float]:
        return {r: round(getattr(self, r), 1) for r in MEASURES}


def kernel_resources(design: DeviceDesign, name: str, coefficients: Coefficients | None = None) -> Resources:
    """The predicted resources of one kernel of ``design``."""
    kind = design.nodes[name].node.kind
    row = (coefficients or load_coefficients()).kinds.get(kind)
    if row is None:
        raise AmpHlsError(f"no resource model for node kind {kind!r} (node '{name}')")
    features, moved = _kernel_parts(design, name, row.placement)
    return row.price(features) + lutram_price(moved)


def with_parallelism(design: DeviceDesign, name: str, parallelism: int) -> DeviceDesign:
    """``design`` with one Linear kernel at another parallelism (for repricing; not for building)."""
    kernel = design.nodes[name]
    node = dataclasses.replace(kernel.node, parallelism=parallelism)  # type: ignore[type-var]
    return dataclasses.replace(design, nodes={**design.nodes, name: dataclasses.replace(kernel, node=node)})


def with_lanes(design: DeviceDesign, name: str, lanes: int) -> DeviceDesign:
    """``design`` with one row-wise kernel at other lanes (for repricing the kernel; its streams'
    lanes are ``StreamLink``'s, priced by ``link_resources``)."""
    kernel = design.nodes[name]
    node = dataclasses.replace(kernel.node, lanes=lanes)  # type: ignore[type-var]
    return dataclasses.replace(design, nodes={**design.nodes, name: dataclasses.replace(kernel, node=node)})


def link_resources(link: StreamLink, options: DeviceOptions, coefficients: Coefficients) -> Resources:
    """One stream's hardware in amp_top: its FIFO (as wide as its writer) and its converters."""
    b = coefficients.boundary
    bits = fifo_address_bits(link, options)
    _, moved = split_moved([fifo_memory(bits, link.src_lanes)], "cost", options)
    out = b["fifo"].price(fifo_features(bits, options.use_uram, kept=not moved, lanes=link.src_lanes)) + lutram_price(moved)
    for part, lanes in link.converters:
        out = out + b[part].price(boundary_features(wide=lanes - 1))
    return out


@dataclass(frozen=True)
class DesignResources:
    """The predicted resources of amp_top: per kernel, the boundary and the stream FIFOs."""

    kernels: dict[str, Resources]
    boundary: Resources  # k_demux, k_mux, amp_control
    fifos: Resources  # the stream FIFOs, and the converters between lanes (link_resources)
    unpriced: dict[str, list[str]] = field(default_factory=dict)  # kind without a model -> its nodes (counted 0)

    @property
    def total(self) -> Resources:
        out = self.boundary + self.fifos
        for r in self.kernels.values():
            out = out + r
        return out

    def over(self, board: Board, margin: float = 1.0) -> list[str]:
        """The board resources the design uses more than ``margin`` of."""
        total = self.total
        return [r for r in BOARD_RESOURCES if getattr(total, r) > margin * board.resources.get(r, 0)]

    def top_users(self, resource: str, n: int = 3) -> list[tuple[str, float]]:
        """The kernels using most of ``resource``, largest first."""
        ranked = sorted(self.kernels.items(), key=lambda kv: -getattr(kv[1], resource))
        return [(name, getattr(r, resource)) for name, r in ranked[:n] if getattr(r, resource) > 0]

    def to_json(self, board: Board | None = None) -> dict[str, Any]:
        doc: dict[str, Any] = {"kernels": {n: r.to_json() for n, r in self.kernels.items()},
                               "boundary": self.boundary.to_json(), "fifos": self.fifos.to_json(),
                               "total": self.total.to_json(), "unpriced": dict(self.unpriced)}
        if board is not None:
            doc["board"] = {r: board.resources.get(r, 0) for r in BOARD_RESOURCES}
            doc["fraction"] = {r: round(getattr(self.total, r) / board.resources[r], 4) if board.resources.get(r) else None
                               for r in BOARD_RESOURCES}
        return doc


def design_resources(design: DeviceDesign, coefficients: Coefficients | None = None,
                     options: DeviceOptions | None = None) -> DesignResources:
    """Price every kernel of ``design``, its boundary and its FIFOs (at ``options``: another cache
    size, FIFOs sized for it by the design's rule)."""
    coefficients = coefficients or load_coefficients()
    options = options or design.options
    at = dataclasses.replace(design, options=options)
    kernels, unpriced = {}, {}
    for name, k in design.nodes.items():
        if k.node.kind in coefficients.kinds:
            kernels[name] = kernel_resources(at, name, coefficients)
        else:
            unpriced.setdefault(k.node.kind, []).append(name)
    b = coefficients.boundary
    boundary = (b["demux"].price(boundary_features(len(design.wiring.demux_routes)))
                + b["mux"].price(boundary_features(len(design.wiring.mux_routes)))
                + b["control"].price(boundary_features(len(design.device_nodes))))
    fifos = Resources()  # with the converters: each stream's own hardware
    for link in design.wiring.streams:
        fifos = fifos + link_resources(link, options, coefficients)
    return DesignResources(kernels, boundary, fifos, unpriced)


def format_resources(used: DesignResources, board: Board) -> str:
    total = used.total
    parts = []
    for r in shown_resources(total.uram, board.resources):
        have = board.resources.get(r, 0)
        pct = f" ({getattr(total, r) / have:.0%})" if have else ""
        parts.append(f"{LABELS[r]} {getattr(total, r):,.0f} of {have:,}{pct}")
    return f"resources (model): {', '.join(parts)} on {board.name}"


def shown_resources(uram_used: float, board_resources: Mapping[str, int]) -> tuple[str, ...]:
    """The board resources worth printing: URAM only on a board with some, or when used."""
    return tuple(r for r in BOARD_RESOURCES if r != "uram" or board_resources.get(r, 0) or uram_used)
