"""The generated C++ headers agree bit for bit with the Python definitions they come from."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from amp_hls.codegen import render_numerics_header, render_wire_header
from amp_hls.numerics import (
    LUT_KINDS,
    NumericConfig,
    Precision,
    SaturationCounter,
    activation_table,
    narrow,
    round_shift,
    saturate_acc,
)
from amp_hls.wire import wire_constants

pytestmark = [pytest.mark.gxx, pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")]

CONFIG = NumericConfig("fixed", data=Precision(16, 10), weights=Precision(16, 12), grads=Precision(16, 11))


def _compile_and_run(tmp_path: Path, main: str) -> list[str]:
    (tmp_path / "amp_wire.h").write_text(render_wire_header())
    (tmp_path / "amp_numerics.h").write_text(render_numerics_header(CONFIG))
    (tmp_path / "main.cpp").write_text(main)
    exe = tmp_path / "main"
    build = subprocess.run(
        ["g++", "-std=c++17", "-Wall", "-Wextra", "-Werror", "-O1", "-o", str(exe), str(tmp_path / "main.cpp")],
        capture_output=True, text=True, timeout=120,
    )
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stderr
    return run.stdout.split()


def test_wire_constants_reach_cpp_unchanged(tmp_path):
    constants = wire_constants()
    prints = "\n".join(f'    std::printf("%lld\\n", (long long)amp::wire::{n});' for n in constants)
    main = f'#include <cstdio>\n#include "amp_wire.h"\nint main() {{\n{prints}\n    return 0;\n}}\n'
    assert [int(v) for v in _compile_and_run(tmp_path, main)] == list(constants.values())


def test_rounding_saturation_and_tables_are_bit_exact(tmp_path):
    rng = np.random.default_rng(7)
    values = np.concatenate([
        rng.integers(-(1 << 40), 1 << 40, 400),
        np.arange(-40, 40),
        [-(1 << 47) - 5, (1 << 47) + 5, -(1 << 62), (1 << 62)],
    ]).astype(np.int64)
    shifts = [-3, 0, 1, 2, 5, 12, 22]
    lut_inputs = np.arange(-40000, 40000, 7, dtype=np.int64)
    arr = ", ".join(f"{int(v)}LL" for v in values)
    lut_arr = ", ".join(f"{int(v)}LL" for v in lut_inputs)
    lut_calls = "\n".join(
        f"    for (long long q : L) std::printf(\"%lld\\n\", (long long)amp::num::{k}_lookup(q));"
        for k in LUT_KINDS
    )
    main = f"""#include <cstdio>
#include "amp_numerics.h"
static const long long V[] = {{{arr}}};
static const long long L[] = {{{lut_arr}}};
int main() {{
    const int S[] = {{{", ".join(map(str, shifts))}}};
    uint32_t sat = 0;
    for (int s : S) for (long long v : V) {{
        if (s >= 0 || (v > -(1LL << 40) && v < (1LL << 40)))
            std::printf("%lld\\n", (long long)amp::num::round_shift(v, s));
        std::printf("%lld\\n", (long long)amp::num::narrow(v, s, amp::num::DATA_MIN, amp::num::DATA_MAX, &sat));
    }}
    for (long long v : V) std::printf("%lld\\n", (long long)amp::num::saturate_acc(v));
{lut_calls}
    std::printf("%u\\n", sat);
    return 0;
}}
"""
    got = [int(v) for v in _compile_and_run(tmp_path, main)]
    expected: list[int] = []
    counter = SaturationCounter()
    for s in shifts:
        for v in values:
            if s >= 0 or -(1 << 40) < v < (1 << 40):
                expected.append(int(round_shift(v, s)))
            expected.append(int(narrow(v, s, CONFIG.data, counter, "x")))
    expected += [int(v) for v in saturate_acc(values)]
    for kind in LUT_KINDS:
        expected += [int(v) for v in activation_table(kind, CONFIG.data).lookup(lut_inputs)]
    expected.append(counter.total)
    assert got == expected
