"""Where a design's memories go (UltraRAM, or LUT-RAM instead of block RAM): the one rule, for the
RTL and the resource model.

An UltraScale+ URAM288 holds 4,096 words of 72 bits (eight RAMB36 of capacity), at one width and
depth only; a memory takes ``uram_blocks`` of them. Boards with URAM (zcu104: 96 blocks, kv260:
64) have far more bits in URAM than in block RAM, but a narrow or shallow memory wastes most of a
block, so a memory goes to URAM only when it fills its blocks at least ``URAM_MIN_FILL_PERMILLE``
of the way: the caches of 64-bit beats at 2,048 words and more (44-89% full, each saving 4 RAMB36
per block), not a 16-bit weight bank (22%). ``amp_pkg`` carries these constants and the design's
``USE_URAM``; ``amp_ram`` (which ``amp_fifo`` keeps its entries in) applies the same rule with them and marks the memory
``(* ram_style = "ultra" *)``, the attribute Vivado and Yosys (``synth_xilinx -family xcup``) map
to URAM288. Designs for boards without URAM never set it.

Block RAM is the other way round: a RAMB36 reads at most 72 bits a cycle, so a Linear's banks at
high parallelism (G at P=64: 3,072 bits a word, 128 words) take one RAMB36 per 72 bits of width
and fill each a quarter. On a board with LUTs to spare (zcu104: 230k LUT to 312 RAMB36) such a
shallow memory is cheaper in LUT-RAM: with ``lutram_depth`` set (``DeviceOptions.lutram_depth``,
chosen by the folding when block RAM bounds it), every amp_ram memory of at most that many words
that is not in URAM is marked ``(* ram_style = "distributed" *)``: RAM64M cells, four LUTs each
holding three bits of 64 words, a LUT per bit choosing among up to four of them, and the read
register in flip-flops (``lutram_cost``; Yosys maps them so, tests/test_lutram.py).

Wide shallow memories are the other way round on boards short of LUTs: Yosys' cost rule puts a
memory in LUT-RAM whenever its cells cost less than the block RAM it would fill a quarter or less
(257 per RAMB36 against 8 per RAM64M), so a Linear's banks at P=32 (G: 1,536 bits x 64 words)
became thousands of LUTs on pynq-z2 with most of its block RAM free. So on a board without URAM
every amp_ram of at least ``BLOCK_MIN_BITS`` not named by ``lutram_depth`` is marked
``(* ram_style = "block" *)`` (``in_block``): tree-rnn's compose at P=32 and 46 slots takes
11,219 LUT and 36.5 RAMB36 instead of 13,935 and 7.5 (Yosys). A board with URAM has LUTs to
spare and is short of block RAM (it holds what URAM does not: ggsnn-qm9 on zcu104 folded to mak 8
and measured 6,639 graphs/s with the rule, 7,815 at mak 10 without), so there the cost rule
stays. Where block RAM is what binds, the folding's ``lutram_depth`` moves the shallow ones back.
"""

from __future__ import annotations

from .errors import AmpHlsError

URAM_WORD_BITS = 72
URAM_WORDS = 4096
URAM_BLOCK_BITS = URAM_WORD_BITS * URAM_WORDS
URAM_MIN_FILL_PERMILLE = 400
LUTRAM_DEPTHS = (128, 256)  # the depth limits the folding tries when block RAM bounds it
LUTRAM_CELL_BITS, LUTRAM_CELL_WORDS, LUTRAM_CELL_LUTS = 3, 64, 4  # a RAM64M
LUTRAM_MUX_INPUTS = 4  # cells one LUT6 chooses among (per bit)
BLOCK_MIN_BITS = 16 * 1024  # an amp_ram of this many bits or more goes to block RAM (in_block)


def uram_blocks(width: int, depth: int) -> int:
    """URAM288 blocks a ``depth`` x ``width`` memory takes (side by side in width, cascaded in depth)."""
    return -(-width // URAM_WORD_BITS) * -(-depth // URAM_WORDS)


def in_uram(width: int, depth: int, use_uram: bool) -> bool:
    """Whether the RTL puts this synchronous memory in URAM (amp_ram.sv computes the same integer
    expression from amp_pkg's constants)."""
    if not use_uram:
        return False
    fill_bits = width * depth // uram_blocks(width, depth)
    return fill_bits * 1000 >= URAM_MIN_FILL_PERMILLE * URAM_BLOCK_BITS


def in_lutram(width: int, depth: int, use_uram: bool, lutram_depth: int) -> bool:
    """Whether the RTL marks this synchronous memory for LUT-RAM: at most ``lutram_depth`` words
    (0: none is) and not in URAM (amp_ram.sv computes the same from amp_pkg's LUTRAM_DEPTH)."""
    return 0 < depth <= lutram_depth and not in_uram(width, depth, use_uram)


def in_block(width: int, depth: int, use_uram: bool, lutram_depth: int) -> bool:
    """Whether the RTL marks this synchronous memory for block RAM whatever Yosys' cost rule would
    choose: at least ``BLOCK_MIN_BITS``, on a board without URAM, not moved to LUT-RAM (amp_ram.sv
    computes the same from amp_pkg's USE_URAM and BLOCK_MIN_BITS)."""
    return width * depth >= BLOCK_MIN_BITS and not use_uram and not in_lutram(width, depth, use_uram, lutram_depth)


def lutram_cost(width: int, depth: int) -> tuple[int, int, int]:
    """(LUTs, of them LUT-RAM, flip-flops) of a ``depth`` x ``width`` memory in LUT-RAM with a
    synchronous read: RAM64M cells, a LUT per bit choosing among each four of them, and the read
    register."""
    cells = -(-width // LUTRAM_CELL_BITS) * -(-depth // LUTRAM_CELL_WORDS)
    banks = -(-depth // LUTRAM_CELL_WORDS)
    mux = width * -(-(banks - 1) // (LUTRAM_MUX_INPUTS - 1))
    return cells * LUTRAM_CELL_LUTS + mux, cells * LUTRAM_CELL_LUTS, width


def check_lutram_depth(depth: object) -> int:
    """``depth`` as a LUT-RAM depth limit: 0 (none) or one of ``LUTRAM_DEPTHS``."""
    if isinstance(depth, bool) or depth not in (0, *LUTRAM_DEPTHS):
        raise AmpHlsError(f"lutram_depth must be 0 (no memory moved to LUT-RAM) or one of "
                          f"{', '.join(map(str, LUTRAM_DEPTHS))}, got {depth!r}")
    return depth  # type: ignore[return-value]


def package_constants(use_uram: bool, lutram_depth: int = 0) -> dict[str, int]:
    """The rule's constants as amp_pkg integer localparams."""
    return {"USE_URAM": int(use_uram), "URAM_WORD_BITS": URAM_WORD_BITS, "URAM_WORDS": URAM_WORDS,
            "URAM_BLOCK_BITS": URAM_BLOCK_BITS, "URAM_MIN_FILL_PERMILLE": URAM_MIN_FILL_PERMILLE,
            "LUTRAM_DEPTH": lutram_depth, "BLOCK_MIN_BITS": BLOCK_MIN_BITS}
