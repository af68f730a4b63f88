"""Vitis fidelity of the hls flow without Vitis: the generated kernels, the C simulation driver
and the C++ testbench (tb/amp_tb.cpp, what hls.tcl's csim and cosim run) build with g++ against
the project's stream shim and against Xilinx's Apache-2.0 ``ap_int`` headers (installed with the
``hlstypes`` extra, never copied here), and the testbench passes with every kernel top in turn
called through its Vitis HLS top function. The shim exposes only what Vitis HLS documents for
``hls::stream``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from amp_hls.codegen.project import generate_project
from amp_hls.design import DeviceOptions
from amp_hls.host.csim import CsimDevice
from amp_hls.models import MODELS
from amp_hls.resources import hw_dir
from amp_hls.sim.vitis_bench import write_vitis_testbench
from amp_hls.toolchain import ap_types_dir
from tests.helpers import FIXED, run_host

GXX = shutil.which("g++")
STRICT = ["-std=c++14", "-O1", "-Wall", "-Wextra", "-Werror", "-Wno-unknown-pragmas"]
# Xilinx's ap_private.h trips GCC 12's uninitialized-value analysis inside the header (false
# positives at -O1 and above); every other warning stays an error.
AP_TYPES = ["-DAMP_USE_AP_TYPES", "-Wno-uninitialized", "-Wno-maybe-uninitialized"]
DOCUMENTED = {"stream", "empty", "full", "size", "read", "read_nb", "write", "write_nb", "operator>>", "operator<<"}


def test_the_stream_shim_has_only_members_vitis_documents():
    text = (hw_dir() / "include" / "amp_stream.h").read_text()
    body = text[text.index("class stream {"):text.index("};", text.index("class stream {"))]
    public = body.split("private:")[0]
    # a member: a declaration line "   [explicit] [type] name(" at the class's indentation
    members = set(re.findall(r"^ {4}(?:explicit |void |bool |T |unsigned |stream& )*(operator\S+?|\w+)\(", public, re.M))
    assert {"empty", "read", "write", "read_nb", "write_nb"} <= members  # what the kernels use
    assert members - {"operator="} <= DOCUMENTED, members - DOCUMENTED  # (= is deleted: no copies)
    assert "clear" not in members and "name" not in members


@pytest.fixture(scope="module")
def projects(tmp_path_factory):
    out = {}
    for model in ("mlp", "list-rnn"):
        d = tmp_path_factory.mktemp(model)
        project = generate_project(MODELS[model].build(), d, "pynq-z2", DeviceOptions(muf=2, cache_slots=40), flow="hls")
        write_vitis_testbench(project.root)
        out[model] = project
    return out


def _run(cmd: list[str]) -> None:
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]


def _build(project, out: Path, *flags: str, top: str | None = None) -> Path:  # type: ignore[no-untyped-def]
    """The testbench with the kernels; the kernels (the same for every top) compiled once per
    set of flags, the bench once per top."""
    root = project.root
    objects = out.parent / ("objects" + str(abs(hash(flags))))
    if not objects.is_dir():
        objects.mkdir()
        for src in sorted((root / "kernels").glob("*.cpp")):
            _run(["g++", *STRICT, f"-I{root / 'include'}", *flags, "-c", "-o", str(objects / f"{src.stem}.o"), str(src)])
    bench = out.with_suffix(".o")
    _run(["g++", *STRICT, f"-I{root / 'include'}", *flags, *([f"-DAMP_TB_TOP_{top}"] if top else []),
          "-c", "-o", str(bench), str(root / "tb" / "amp_tb.cpp")])
    _run(["g++", "-o", str(out), str(bench), *map(str, sorted(objects.glob("*.o")))])
    return out


def _tops(project) -> list[str]:  # type: ignore[no-untyped-def]
    return [k.top for k in project.hls.design.nodes.values()] + ["k_demux", "k_mux"]


@pytest.mark.gxx
@pytest.mark.skipif(GXX is None, reason="needs g++")
@pytest.mark.parametrize("model", ["mlp", "list-rnn"])
@pytest.mark.parametrize("headers", ["shim", "ap_types"])
def test_the_testbench_passes_with_every_top_called_through_its_top_function(projects, model, headers, tmp_path):
    project = projects[model]
    flags: list[str] = []
    if headers == "ap_types":
        found = ap_types_dir()
        if found is None:
            pytest.skip("no package ships Xilinx's ap_int headers here (pip install 'amp-hls[hlstypes]')")
        flags = ["-isystem", str(found), *AP_TYPES]
    # every kernel compiles with the headers in each case; list-rnn's tops are called in turn
    # with the shim only (the bench itself is the same C++ either way)
    tops = [None, *_tops(project)] if headers == "shim" or model == "mlp" else [None]
    for top in tops:
        exe = _build(project, tmp_path / f"tb_{top}", *flags, top=top)
        run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
        assert run.returncode == 0 and "all match the numpy device model" in run.stdout, (top, run.stdout)


@pytest.mark.gxx
@pytest.mark.skipif(GXX is None, reason="needs g++")
def test_a_testbench_that_finds_a_difference_fails(projects, tmp_path):
    project = projects["mlp"]
    tb = project.root / "tb" / "amp_tb.cpp"
    text = tb.read_text()
    broken = tmp_path / "broken"
    shutil.copytree(project.root, broken, ignore=shutil.ignore_patterns("build"))
    first = re.search(r"const uint64_t out_beats\[\] = \{\s+0x([0-9a-f]{16})ull", text)
    assert first
    (broken / "tb" / "amp_tb.cpp").write_text(text.replace(f"0x{first.group(1)}ull", "0x0000000000000001ull", 1))
    from types import SimpleNamespace
    exe = _build(SimpleNamespace(root=broken), tmp_path / "tb")
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 1 and "FAILED" in run.stdout


@pytest.mark.gxx
@pytest.mark.skipif(GXX is None, reason="needs g++")
def test_the_c_simulation_builds_against_xilinxs_ap_int_headers_and_is_bit_exact(projects, tmp_path):
    found = ap_types_dir()
    if found is None:
        pytest.skip("no package ships Xilinx's ap_int headers here (pip install 'amp-hls[hlstypes]')")
    project = projects["mlp"]
    root = project.root
    lib = tmp_path / "libcsim.so"
    cmd = ["g++", "-std=c++17", "-O2", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror", "-Wno-unknown-pragmas",
           "-isystem", str(found), *AP_TYPES, f"-I{root / 'include'}", "-o", str(lib),
           *map(str, project.hls.csim_sources)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    spec = MODELS["mlp"]
    instances = [spec.inputs(e) for e in spec.splits(0).train[:12]]
    from amp_hls.host import CpuDevice
    from amp_hls.host.runner import by_channel

    got = run_host(CsimDevice(project.hls, library=lib), instances, 3, weights_of=spec.build())
    want = run_host(CpuDevice(project.hls.placement, FIXED, muf=2), instances, 3, weights_of=spec.build())
    a, b = by_channel(got.received), by_channel(want.received)
    assert a.keys() == b.keys()
    for k in b:
        assert sorted((m.tag, m.payload.tobytes()) for m in a[k]) == sorted((m.tag, m.payload.tobytes()) for m in b[k])


def test_a_folded_zoo_model_is_recorded_on_its_own_data(tmp_path):
    """A design folded to other parallelism is still the zoo model: its testbench replays the
    model's examples (list-rnn's loop reads the tag state random instances leave empty, so it
    would lose its messages)."""
    from amp_hls.cycles.folding import pin
    from amp_hls.sim.project_bench import instances_for

    graph = MODELS["list-rnn"].build()
    folded = pin(graph, {"rnn": 2})
    want = instances_for(graph, 3, seed=0)
    assert repr(instances_for(folded, 3, seed=0)) == repr(want)
    generate_project(folded, tmp_path / "p", "pynq-z2", DeviceOptions(muf=4))
    assert (write_vitis_testbench(tmp_path / "p")).is_file()
