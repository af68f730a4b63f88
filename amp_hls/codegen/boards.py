"""Board descriptions (``hw/boards/<name>.json``): part, clock, processing system, capacities, DMA.

Every value reaches tcl and Makefiles, so a board file is validated like user input: names and
parts must be inert words, numbers must be in range. The board's name is looked up among the
files that exist; it is never used to build a path.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import AmpHlsError
from ..resources import hw_dir

SCHEMA = "amp-hls.board"
SCHEMA_VERSION = 1
PS_TYPES = ("zynq7", "zynq_ultra_ps_e")
RESOURCES = ("lut", "ff", "dsp", "bram36", "uram")
_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*\Z")
_BOARD_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*(:[A-Za-z0-9][A-Za-z0-9_.-]*){2}\Z")  # vendor:board:part0


class BoardError(AmpHlsError):
    """An unknown board, or a board file that breaks the schema."""


@dataclass(frozen=True)
class Board:
    name: str
    description: str
    part: str  # the FPGA part, e.g. xc7z020clg400-1
    board_part: str | None  # vendor:board:component without its file version (tcl picks the newest)
    ps: str  # "zynq7" (processing_system7) or "zynq_ultra_ps_e"
    clock_mhz: float
    resources: dict[str, int]  # lut, ff, dsp, bram36, uram
    dma_length_width: int  # AXI DMA buffer length register width (bits): max bytes per transfer
    dma_addr_width: int
    dma_data_width: int
    source: str

    @property
    def clock_period_ns(self) -> float:
        return 1000.0 / self.clock_mhz

    @property
    def max_dma_transfer_bytes(self) -> int:
        return (1 << self.dma_length_width) - 1

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "part": self.part,
            "board_part": self.board_part,
            "ps": self.ps,
            "clock_mhz": self.clock_mhz,
            "resources": dict(self.resources),
            "dma": {
                "length_width": self.dma_length_width,
                "max_transfer_bytes": self.max_dma_transfer_bytes,
                "addr_width": self.dma_addr_width,
                "data_width": self.dma_data_width,
            },
        }


def boards_dir() -> Path:
    return hw_dir() / "boards"


def known_boards() -> list[str]:
    return sorted(p.stem for p in boards_dir().glob("*.json"))


def load_board(name: str) -> Board:
    """The board called ``name``; an unknown name is an error that lists the known boards."""
    known = known_boards()
    if name not in known:
        raise BoardError(f"unknown board {name!r}; known boards: {', '.join(known) or '(none)'}")
    path = boards_dir() / f"{name}.json"
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise BoardError(f"board file {path} is not readable JSON: {exc}") from None
    return board_from_json(doc, name)


def board_from_json(doc: Any, name: str) -> Board:
    def fail(msg: str) -> BoardError:
        return BoardError(f"board {name!r}: {msg}")

    def get(d: Any, key: str, kind: type | tuple[type, ...]) -> Any:
        if not isinstance(d, dict) or key not in d:
            raise fail(f"missing field {key!r}")
        value = d[key]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise fail(f"field {key!r} has the wrong type ({type(value).__name__})")
        return value

    if get(doc, "schema", str) != SCHEMA or get(doc, "version", int) != SCHEMA_VERSION:
        raise fail(f"not a {SCHEMA} version {SCHEMA_VERSION} document")
    if get(doc, "name", str) != name:
        raise fail(f"the file says its name is {doc['name']!r}")
    part = get(doc, "part", str)
    if not _PART.match(part):
        raise fail(f"part {part!r} is not a part number")
    board_part = doc.get("board_part")
    if board_part is not None and not (isinstance(board_part, str) and _BOARD_PART.match(board_part)):
        raise fail(f"board_part {board_part!r} is not vendor:board:component (no version)")
    ps = get(doc, "ps", str)
    if ps not in PS_TYPES:
        raise fail(f"ps {ps!r} is not one of {', '.join(PS_TYPES)}")
    clock = get(doc, "clock_mhz", (int, float))
    if not 10 <= clock <= 500:
        raise fail(f"clock_mhz {clock} outside [10, 500]")
    res = get(doc, "resources", dict)
    resources = {}
    for key in RESOURCES:
        resources[key] = get(res, key, int)
        if resources[key] < 0:
            raise fail(f"resources.{key} is negative")
    dma = get(doc, "dma", dict)
    length_width = get(dma, "length_width", int)
    if not 8 <= length_width <= 26:  # the AXI DMA's range (PG021)
        raise fail(f"dma.length_width {length_width} outside the AXI DMA's [8, 26]")
    addr_width = get(dma, "addr_width", int)
    data_width = get(dma, "data_width", int)
    if addr_width not in (32, 64) or data_width != 64:
        raise fail("dma.addr_width must be 32 or 64 and dma.data_width 64 (the wire's beat)")
    return Board(
        name=name,
        description=get(doc, "description", str),
        part=part,
        board_part=board_part,
        ps=ps,
        clock_mhz=float(clock),
        resources=resources,
        dma_length_width=length_width,
        dma_addr_width=addr_width,
        dma_data_width=data_width,
        source=get(doc, "source", str),
    )
