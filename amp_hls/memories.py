"""Which of a design's memories go to UltraRAM: the one rule, for the RTL and the resource model.

An UltraScale+ URAM288 holds 4,096 words of 72 bits (eight RAMB36 of capacity), at one width and
depth only; a memory takes ``uram_blocks`` of them. Boards with URAM (zcu104: 96 blocks, kv260:
64) have far more bits in URAM than in block RAM, but a narrow or shallow memory wastes most of a
block, so a memory goes to URAM only when it fills its blocks at least ``URAM_MIN_FILL_PERMILLE``
of the way: the caches of 64-bit beats at 2,048 words and more (44-89% full, each saving 4 RAMB36
per block), not a 16-bit weight bank (22%). ``amp_pkg`` carries these constants and the design's
``USE_URAM``; ``amp_ram`` (which ``amp_fifo`` keeps its entries in) applies the same rule with them and marks the memory
``(* ram_style = "ultra" *)``, the attribute Vivado and Yosys (``synth_xilinx -family xcup``) map
to URAM288. Designs for boards without URAM never set it.
"""

from __future__ import annotations

URAM_WORD_BITS = 72
URAM_WORDS = 4096
URAM_BLOCK_BITS = URAM_WORD_BITS * URAM_WORDS
URAM_MIN_FILL_PERMILLE = 400


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


def package_constants(use_uram: bool) -> dict[str, int]:
    """The rule's constants as amp_pkg integer localparams."""
    return {"USE_URAM": int(use_uram), "URAM_WORD_BITS": URAM_WORD_BITS, "URAM_WORDS": URAM_WORDS,
            "URAM_BLOCK_BITS": URAM_BLOCK_BITS, "URAM_MIN_FILL_PERMILLE": URAM_MIN_FILL_PERMILLE}
