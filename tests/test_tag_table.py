"""amp_tag_table (the LUT-RAM CAM every stateful RTL kernel keys its entries by) against a Python
model of the table it replaced: SLOTS entries of a tag and a used bit, looked up all at once.

The bench below runs inside Verilator (cocotb); the pytest test builds it once and runs it. Tags
come from a small pool of near neighbours (a base tag with one or two of its CW-bit chunks
changed), so most look-ups share every chunk but one with some entry: a CAM that ANDs its chunk
columns wrongly, or keeps a stale bit, gives a false hit. Every cycle checks ``hit``, ``hit_slot``
(the lowest used entry holding the tag: duplicates are inserted on purpose), ``free_slot`` (the
lowest unused), ``full`` and the ``used`` register, then inserts, removes, does both (on two
slots, or on one with the same tag) or nothing, at random. A reset with the table full comes in
the middle: during the scrub that follows the table must read full with no hit, for exactly
2**CW cycles, and afterwards no tag inserted before the reset may hit, nor any mix of the old
tags' chunks with the new ones'.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from amp_hls.cycles.resources import tag_table_chunk_bits
from amp_hls.wire import TAG_BITS

runner = pytest.importorskip("amp_hls.sim.runner")
cocotb = pytest.importorskip("cocotb")
from cocotb.clock import Clock  # noqa: E402
from cocotb.triggers import FallingEdge, RisingEdge, Timer  # noqa: E402

from tests.helpers import tag_table_top  # noqa: E402

pytestmark = [pytest.mark.verilator,
              pytest.mark.skipif(not runner.available(), reason="needs cocotb, cocotbext-axi, verilator")]

SLOTS = 8
CW = tag_table_chunk_bits()  # the table's chunk bits (its localparam): the scrub takes 2**CW cycles
SCRUB = 1 << CW
CHUNKS = -(-TAG_BITS // CW)
CYCLES = 1500  # random cycles before the reset, and again after it
TOP = "tag_table_tb"
RTL = Path(__file__).resolve().parents[1] / "hw" / "rtl" / "amp_tag_table.sv"


def test_tag_table_against_model(tmp_path: Path) -> None:
    (tmp_path / f"{TOP}.sv").write_text(tag_table_top(TOP, SLOTS))
    build = runner.build([RTL, tmp_path / f"{TOP}.sv"], TOP, tmp_path / "cache")
    runner.run(build, TOP, "tests.test_tag_table", tmp_path / "run", {"AMP_TT_SEED": "7"})


# --------------------------------------------------------------------------- the bench (in the simulator)


def _mutate(rng: random.Random, tag: int, chunks: int) -> int:
    """``tag`` with ``chunks`` of its CW-bit chunks set to other values (within TAG_BITS)."""
    for c in rng.sample(range(CHUNKS), chunks):
        lo, width = c * CW, min(CW, TAG_BITS - c * CW)
        old = (tag >> lo) & ((1 << width) - 1)
        new = rng.choice([v for v in range(1 << width) if v != old])
        tag = (tag & ~(((1 << width) - 1) << lo)) | (new << lo)
    return tag


class Model:
    """The table as the old comparator version defined it."""

    def __init__(self) -> None:
        self.tags: list[int | None] = [None] * SLOTS

    def hit(self, tag: int) -> int | None:
        return next((s for s, t in enumerate(self.tags) if t == tag), None)

    def free(self) -> int | None:
        return next((s for s, t in enumerate(self.tags) if t is None), None)


async def _settle(dut, tag: int) -> None:  # type: ignore[no-untyped-def]
    dut.tag.value = tag
    await Timer(1, "ns")


def _check(dut, model: Model, tag: int, where: str) -> None:  # type: ignore[no-untyped-def]
    want_hit, want_free = model.hit(tag), model.free()
    got = (int(dut.hit.value), int(dut.hit_slot.value), int(dut.free_slot.value), int(dut.full.value))
    want = (want_hit is not None, got[1] if want_hit is None else want_hit, got[2] if want_free is None else want_free,
            want_free is None)
    assert got == want, f"{where}: tag {tag:#x}: (hit, hit_slot, free_slot, full) {got}, want {want} ({model.tags})"
    used = sum(1 << s for s, t in enumerate(model.tags) if t is not None)
    assert int(dut.t.used.value) == used, f"{where}: used {int(dut.t.used.value):#x}, want {used:#x}"


async def _cycle(dut, tag: int, insert: int | None = None, remove: int | None = None) -> None:  # type: ignore[no-untyped-def]
    """Drive one clock edge's operation (inputs settled before the rising edge)."""
    dut.tag.value = tag
    dut.insert.value = insert is not None
    dut.insert_slot.value = insert or 0
    dut.remove.value = remove is not None
    dut.remove_slot.value = remove or 0
    await RisingEdge(dut.ap_clk)
    await FallingEdge(dut.ap_clk)
    dut.insert.value = 0
    dut.remove.value = 0


async def _reset(dut) -> None:  # type: ignore[no-untyped-def]
    """Reset for two cycles, then the scrub: full, no hit, for exactly SCRUB cycles."""
    dut.ap_rst_n.value = 0
    for _ in range(2):
        await _cycle(dut, 0)
    dut.ap_rst_n.value = 1
    for i in range(SCRUB):
        await Timer(1, "ns")
        assert int(dut.full.value) == 1 and int(dut.hit.value) == 0, f"scrub cycle {i}: full {dut.full.value}, hit {dut.hit.value}"
        await _cycle(dut, 0)
    await Timer(1, "ns")
    assert int(dut.full.value) == 0, f"still full {SCRUB} cycles after the reset"


async def _random(dut, rng: random.Random, model: Model, pool: list[int], cycles: int, where: str) -> None:  # type: ignore[no-untyped-def]
    for n in range(cycles):
        used = [s for s, t in enumerate(model.tags) if t is not None]
        op = rng.random()
        insert = remove = None
        if op < 0.2 and used:  # remove, with the entry's tag in hand (the module's rule)
            remove = rng.choice(used)
            tag = model.tags[remove]
        elif op < 0.25 and used and model.free() is not None:  # both, on two slots
            remove = rng.choice(used)
            tag = model.tags[remove]
            insert = model.free()
        elif op < 0.28 and used:  # both on one slot, its own tag: the insert wins
            remove = insert = rng.choice(used)
            tag = model.tags[insert]
        else:
            tag = rng.choice(pool)
            if op < 0.7 and model.free() is not None:  # insert, a duplicate now and then
                insert = model.free()
        assert tag is not None
        await _settle(dut, tag)
        _check(dut, model, tag, f"{where} cycle {n}")
        await _cycle(dut, tag, insert, remove)
        if remove is not None:
            model.tags[remove] = None
        if insert is not None:
            model.tags[insert] = tag


if os.environ.get("AMP_TT_SEED"):  # only inside the simulator

    @cocotb.test(timeout_time=10, timeout_unit="ms")
    async def tag_table_random(dut) -> None:  # type: ignore[no-untyped-def]
        rng = random.Random(int(os.environ["AMP_TT_SEED"]))
        cocotb.start_soon(Clock(dut.ap_clk, 10, "ns").start())
        dut.insert.value = 0
        dut.remove.value = 0
        await FallingEdge(dut.ap_clk)
        await _reset(dut)
        base = rng.getrandbits(TAG_BITS)
        pool = [base] + [_mutate(rng, base, rng.choice((1, 2))) for _ in range(2 * SLOTS)]
        model = Model()
        await _random(dut, rng, model, pool, CYCLES, "before the reset")
        while (slot := model.free()) is not None:  # fill the table, then reset it full
            tag = rng.choice(pool)
            await _settle(dut, tag)
            _check(dut, model, tag, "filling")
            await _cycle(dut, tag, slot)
            model.tags[slot] = tag
        old = list(model.tags)
        await _reset(dut)
        model = Model()
        for tag in old:  # nothing inserted before the reset hits
            await _settle(dut, tag)
            _check(dut, model, tag, "after the reset")
        new = [_mutate(rng, t, 2) for t in old]  # each slot again, a tag two chunks away from its old one
        for s, tag in enumerate(new):
            await _settle(dut, tag)
            _check(dut, model, tag, "refilling")
            await _cycle(dut, tag, s)
            model.tags[s] = tag
        for s, (a, b) in enumerate(zip(old, new)):  # a's chunks but one of b's: stale bits would match
            assert a is not None
            diff = [c for c in range(CHUNKS) if (a ^ b) >> (c * CW) & ((1 << CW) - 1)]
            mask = ((1 << CW) - 1) << (diff[0] * CW)
            for tag in (a, (a & ~mask) | (b & mask)):
                await _settle(dut, tag)
                _check(dut, model, tag, f"stale bits of slot {s}")
        await _random(dut, rng, model, pool + old, CYCLES, "after the reset")
