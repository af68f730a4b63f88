"""Board projects: `amp-hls generate` writes HLS C++, the RTL, Vivado (and for the hls flow Vitis
HLS) tcl, a Makefile, a README.

No Xilinx tool runs here. The tcl is executed by tclsh with every Vitis/Vivado command it uses
stubbed (each call recorded), so the tests see every step run, every kernel synthesised, every
stream get exactly one FIFO between the right ports, and each failure stop the script. The stubs
are strict where the tools are: every file an ``add_files`` names must exist, a module reference
must be a module defined in an added file, an IP must be in the catalog (Xilinx's IPs the
scripts use, and the cores hls.tcl exported), and a module reference's interface and port pins
must be declared in its source. The Makefile runs with fake `vitis_hls`/`vivado` executables that
run the same stubs. Two flows: ``rtl`` (the default: amp_top as a module reference) and ``hls``.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from amp_hls.cli import main
from amp_hls.codegen.boards import BoardError, board_from_json, known_boards, load_board
from amp_hls.codegen.project import generate_project, open_design, open_project
from amp_hls.design import SMALL_FIFO, dump_fifo_bits
from amp_hls.errors import IRError
from amp_hls.host.csim import build_csim
from amp_hls.ir import dumps
from amp_hls.ir.serialize import graph_from_json
from amp_hls.models import MODELS
from amp_hls.placement import place
from amp_hls.resources import hw_dir, templates_dir

BOARDS = ("pynq-z2", "zcu104", "kv260")
FLOWS = ("hls", "rtl")
PROJECT_MODELS = ("mlp", "list-rnn")
TCLSH = shutil.which("tclsh")
MAKE = shutil.which("make")
needs_tclsh = pytest.mark.skipif(TCLSH is None, reason="tclsh is not installed")
needs_make = pytest.mark.skipif(MAKE is None or TCLSH is None, reason="make and tclsh are needed")

# Stubs of every Vitis HLS / Vivado command the generated scripts call. A command the stubs do
# not define is an "invalid command name" error, so a script that uses anything else fails here.
# Each call is logged as one line, its words separated by \x1f. AMP_STUB_FAIL=<command> makes that command fail;
# the other AMP_STUB_* variables shape the tools' answers (board files present, run status, timing).
STUB_TCL = r"""
set ::stub_log [open $::env(AMP_STUB_LOG) a]
proc stub_env {name default} {
    if {[info exists ::env($name)]} { return $::env($name) }
    return $default
}
set ::stub_cells {}
set ::stub_repos {}
set ::stub_ipdefs {}
set ::stub_modules [dict create]
set ::stub_cell_module [dict create]
set ::stub_xilinx_ips {processing_system7 zynq_ultra_ps_e proc_sys_reset axi_dma axi_interconnect axis_data_fifo}
proc stub_record {cmd arglist} {
    puts $::stub_log [join [list $cmd {*}$arglist] \x1f]
    flush $::stub_log
    if {$cmd eq [stub_env AMP_STUB_FAIL ""]} { error "$cmd: stubbed tool failure" }
}
proc stub {name body} {
    proc $name {args} "stub_record $name \$args\n$body"
}
proc stub_positional {arglist flags_with_value} {
    set out {}
    for {set i 0} {$i < [llength $arglist]} {incr i} {
        set a [lindex $arglist $i]
        if {$a in $flags_with_value} { incr i; continue }
        if {[string match -* $a]} { continue }
        lappend out $a
    }
    return $out
}
proc stub_touch {path} {
    file mkdir [file dirname $path]
    set f [open $path w]; puts $f stub; close $f
}

# Every file add_files names must exist; the modules of Verilog/SystemVerilog ones are recorded.
proc stub_add_files {arglist} {
    foreach f [stub_positional $arglist {-cflags -csimflags -fileset -of_objects}] {
        foreach g $f {
            if {![file isfile $g]} { error "add_files: no such file $g" }
            if {[file extension $g] in {.v .sv}} {
                set fh [open $g]; set text [read $fh]; close $fh
                foreach {- name} [regexp -all -inline -line {^\s*module\s+(\w+)} $text] {
                    dict set ::stub_modules $name $text
                }
            }
        }
    }
}

# ---- Vitis HLS
stub open_project { set ::stub_hls_project [lindex [stub_positional $args {}] 0] }
stub open_solution { set ::stub_solution [lindex [stub_positional $args {-flow_target}] 0] }
stub add_files { stub_add_files $args }
foreach c {set_top set_part create_clock csim_design csynth_design cosim_design close_project} {
    stub $c {}
}
stub export_design { stub_touch $::stub_hls_project/$::stub_solution/impl/ip/component.xml }

# ---- Vivado
stub create_project {
    lassign [stub_positional $args {-part}] ::stub_proj ::stub_proj_dir
}
stub get_board_parts {
    if {[stub_env AMP_STUB_NO_BOARD 0]} { return {} }
    return [string map {* 1.9} [lindex $args end]]
}
stub set_property {
    if {[lindex $args 0] eq "ip_repo_paths"} { set ::stub_repos [lindex $args 1] }
}
# The catalog: the Xilinx IPs the scripts use, and the cores exported into the IP repositories.
stub get_ipdefs {
    set vlnv [lindex $args end]
    lassign [split $vlnv :] vendor library name version
    if {$vendor eq "xilinx.com"} {
        if {$name ni $::stub_xilinx_ips} { return {} }
        set found [string map {* 9.9} $vlnv]
        lappend ::stub_ipdefs $found
        return $found
    }
    foreach repo $::stub_repos {
        if {[file tail [file dirname [file dirname [file dirname $repo]]]] eq $name
            && [file isfile $repo/component.xml]} { lappend ::stub_ipdefs $vlnv; return $vlnv }
    }
    return {}
}
stub create_bd_design { set ::stub_bd [lindex $args 0] }
proc stub_option {arglist flag} { return [lindex $arglist [expr {[lsearch $arglist $flag] + 1}]] }
stub create_bd_cell {
    set name [lindex $args end]
    if {[stub_option $args -type] eq "module"} {
        set ref [stub_option $args -reference]
        if {![dict exists $::stub_modules $ref]} { error "create_bd_cell: module $ref is not defined in any added file" }
        dict set ::stub_cell_module $name $ref
    } else {
        set vlnv [stub_option $args -vlnv]
        if {$vlnv ni $::stub_ipdefs} { error "create_bd_cell: IP $vlnv is not in the catalog" }
    }
    lappend ::stub_cells $name
}
# A module reference has the pins its source declares: AXI-stream interfaces by their
# X_INTERFACE_INFO attributes, ports by name.
proc stub_pins {arglist kind} {
    set out {}
    foreach p [stub_positional $arglist {}] {
        lassign [split $p /] cell pin
        if {$cell ni $::stub_cells} { continue }
        if {[dict exists $::stub_cell_module $cell]} {
            set text [dict get $::stub_modules [dict get $::stub_cell_module $cell]]
            if {$kind eq "intf"} {
                if {[string first "xilinx.com:interface:axis:1.0 $pin TDATA" $text] < 0} { continue }
            } else {
                set ports [lmap {- name} [regexp -all -inline -line {(?:input|output)\s+(?:wire|reg)\s+(?:\[[^]]*\]\s*)?(\w+)} $text] {set name}]
                if {$pin ni $ports} { continue }
            }
        }
        lappend out $p
    }
    return $out
}
stub get_bd_pins { return [stub_pins $args pin] }
stub get_bd_intf_pins { return [stub_pins $args intf] }
stub get_bd_cells { return [lindex $args end] }
foreach c {update_ip_catalog apply_bd_automation connect_bd_intf_net connect_bd_net
           assign_bd_address validate_bd_design save_bd_design update_compile_order
           launch_runs} {
    stub $c {}
}
stub current_project { return $::stub_proj }
stub current_fileset { return sources_1 }
stub get_files { return [lindex $args end] }
stub get_runs { return [lindex $args end] }
stub generate_target {
    stub_touch $::stub_proj_dir/$::stub_proj.gen/sources_1/bd/$::stub_bd/hw_handoff/$::stub_bd.hwh
}
stub make_wrapper {
    set wrapper $::stub_proj_dir/$::stub_proj.gen/sources_1/bd/$::stub_bd/hdl/${::stub_bd}_wrapper.v
    file mkdir [file dirname $wrapper]
    set f [open $wrapper w]; puts $f "module ${::stub_bd}_wrapper ();\nendmodule"; close $f
    return $wrapper
}
stub wait_on_run {
    set run [lindex $args end]
    if {$run eq "impl_1"} { stub_touch $::stub_proj_dir/$::stub_proj.runs/impl_1/${::stub_bd}_wrapper.bit }
}
stub get_property {
    lassign $args prop obj
    switch -- $prop {
        PROGRESS { return 100% }
        STATUS {
            if {$obj eq "synth_1"} { return [stub_env AMP_STUB_SYNTH_STATUS "synth_design Complete!"] }
            return "write_bitstream Complete!"
        }
        STATS.WNS { return [stub_env AMP_STUB_WNS 0.250] }
        STATS.WHS { return 0.020 }
        DIRECTORY { return $::stub_proj_dir/$::stub_proj.runs/$obj }
    }
    error "stub get_property: unknown property $prop"
}
"""

DRIVER_TCL = r"""
source $env(AMP_STUB_TCL)
set script [lindex $argv 0]
set argv [lrange $argv 1 end]
set argc [llength $argv]
source $script
"""

# Fake tool executables for the Makefile: `vitis_hls -f X` / `vivado ... -source X -tclargs ...`.
FAKE_TOOL = """#!/bin/sh
script=""
while [ $# -gt 0 ]; do
    case "$1" in
        -f|-source) script="$2"; shift 2 ;;
        -tclargs) shift; break ;;
        *) shift ;;
    esac
done
exec tclsh "$AMP_STUB_DRIVER" "$script" "$@"
"""


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "amp_hls.cli", *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd)


def _missing_kernel_templates(model: str) -> list[str]:
    graph = MODELS[model].build()
    kinds = {graph.nodes[n].kind for n in place(graph).device_nodes}
    return sorted(k for k in kinds if not (templates_dir() / "hls" / "kernels" / f"{k}.cpp.j2").is_file())


def _require_kernels(model: str) -> None:
    missing = _missing_kernel_templates(model)
    if missing:  # the kernel templates of these node kinds are still being written
        pytest.skip(f"{model}: no HLS kernel template yet for {', '.join(missing)}")


@pytest.fixture(scope="module")
def stub_files(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("stubs")
    (d / "stub.tcl").write_text(STUB_TCL)
    (d / "driver.tcl").write_text(DRIVER_TCL)
    bindir = d / "bin"
    bindir.mkdir()
    for tool in ("vitis_hls", "vivado"):
        (bindir / tool).write_text(FAKE_TOOL)
        (bindir / tool).chmod(0o755)
    return {"AMP_STUB_TCL": str(d / "stub.tcl"), "AMP_STUB_DRIVER": str(d / "driver.tcl"), "bin": str(bindir)}


@pytest.fixture(scope="module")
def projects(tmp_path_factory) -> dict[tuple[str, ...], Path]:
    """Every (model, board) project of the hls flow, and (model, board, "rtl") of the rtl flow,
    generated once through the CLI; kept pristine (copy to modify)."""
    root = tmp_path_factory.mktemp("projects")
    out: dict[tuple[str, ...], Path] = {}
    for model in PROJECT_MODELS:
        if _missing_kernel_templates(model):
            continue
        for board in BOARDS:
            for flow in FLOWS:
                d = root / f"{model}-{board}-{flow}"
                assert main(["generate", model, "-o", str(d), "--board", board, "--flow", flow, "--no-fold"]) == 0
                out[(model, board) if flow == "hls" else (model, board, flow)] = d
    return out


def _project(projects, tmp_path: Path, model: str, board: str, flow: str = "hls") -> Path:
    _require_kernels(model)
    dst = tmp_path / "proj"
    shutil.copytree(projects[(model, board) if flow == "hls" else (model, board, flow)], dst)
    return dst


def _tcl(stub_files, script: Path, *args: str, log: Path, **env: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, "AMP_STUB_TCL": stub_files["AMP_STUB_TCL"], "AMP_STUB_LOG": str(log), **env}
    return subprocess.run([TCLSH, stub_files["AMP_STUB_DRIVER"], str(script), *args], capture_output=True,
                          text=True, timeout=60, env=environ, cwd="/")


def _calls(log: Path) -> list[list[str]]:
    """The logged calls: [command, arg, ...] each."""
    return [line.split("\x1f") for line in log.read_text().splitlines()]


def _csim_wiring(d: Path) -> tuple[set[str], dict[str, str]]:
    """From the generated C-sim driver: its streams, and 'top/port' -> stream for every kernel port."""
    manifest = json.loads((d / "manifest.json").read_text())
    src = (d / "csim" / "amp_csim.cpp").read_text()
    streams = set(re.findall(r'amp::Stream (\w+)\("\w+"\);', src)) - {"host_in", "host_out"}
    ports = {k["top"]: k["ports"] for k in manifest["kernels"]}
    calls = dict(re.findall(r"(\w+)_step\(([^)]*)\)", src))
    port_stream = {}
    for top, arglist in calls.items():
        args = [a.strip() for a in arglist.split(",")]
        names = ports.get(top, args)  # k_demux / k_mux: the ports are named after their streams
        for port, stream in zip(names, args, strict=True):
            port_stream[f"{top}/{port}"] = stream
    return streams, port_stream


# ------------------------------------------------------------------------------------ boards


def test_board_files_load_with_their_published_facts():
    assert known_boards() == sorted(BOARDS)
    z2, zcu, kv = (load_board(b) for b in BOARDS)
    assert (z2.part, z2.ps, z2.resources["dsp"], z2.resources["bram36"]) == ("xc7z020clg400-1", "zynq7", 220, 140)
    assert (zcu.part, zcu.ps, zcu.resources["lut"], zcu.resources["uram"]) == ("xczu7ev-ffvc1156-2-e", "zynq_ultra_ps_e", 230400, 96)
    assert (kv.part, kv.ps, kv.resources["dsp"], kv.resources["bram36"]) == ("xck26-sfvc784-2LV-c", "zynq_ultra_ps_e", 1248, 144)
    for b in (z2, zcu, kv):
        assert b.dma_length_width == 26 and b.max_dma_transfer_bytes == 67_108_863
        assert b.clock_period_ns == pytest.approx(10.0)
        assert b.source


def test_unknown_board_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(BoardError, match="unknown board 'zedboard'; known boards: kv260, pynq-z2, zcu104"):
        load_board("zedboard")
    with pytest.raises(BoardError, match="unknown board"):
        load_board("../boards/pynq-z2")  # a name, never a path
    out = tmp_path / "out"
    assert main(["generate", "mlp", "-o", str(out), "--board", "zedboard"]) == 2
    assert "known boards: kv260, pynq-z2, zcu104" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("change, message", [
    ({"part": "xc7z020; exec rm -rf /"}, "not a part number"),
    ({"board_part": "tul.com.tw:pynq-z2:part0:1.0 [exec x]"}, "board_part"),
    ({"ps": "microblaze"}, "ps 'microblaze'"),
    ({"clock_mhz": "100"}, "wrong type"),
    ({"clock_mhz": 2000}, "outside"),
    ({"dma": {"length_width": 27, "addr_width": 32, "data_width": 64}}, "length_width 27"),
    ({"resources": {"lut": 1, "ff": 1, "dsp": 1, "bram36": 1}}, "uram"),
    ({"name": "zcu104"}, "says its name"),
])
def test_board_files_are_validated(change, message):
    doc = json.loads((hw_dir() / "boards" / "pynq-z2.json").read_text())
    with pytest.raises(BoardError, match=re.escape(message)):
        board_from_json({**doc, **change}, "pynq-z2")


# ------------------------------------------------------------------------- generate, files


@pytest.mark.parametrize("model", PROJECT_MODELS)
def test_generate_takes_under_two_seconds(model, tmp_path):
    """The whole `amp-hls generate` process (interpreter, imports, writing) stays under 2 s of CPU.

    CPU time, not wall time, so a loaded test machine does not make it flaky; the generation
    itself (in process) must take under 1 s of CPU. Measured on the development machine, list-rnn:
    1.1 s CPU per process with the templates' bytecode cached (codegen.jinja), 1.8 s without;
    sizing its caches on the model's data is 0.8 s of it.
    """
    _require_kernels(model)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    run = _cli("generate", model, "-o", str(tmp_path / "p"), "--board", "pynq-z2", "--no-fold", "--muf", "4",
               "--cache-slots", "32")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert run.returncode == 0, run.stderr
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert cpu < 2.0, f"amp-hls generate {model} used {cpu:.2f} s of CPU"
    manifest = json.loads((tmp_path / "p" / "manifest.json").read_text())
    assert (manifest["muf"], manifest["cache_slots"]) == (4, 32)
    start = time.process_time()
    generate_project(MODELS[model].build(), tmp_path / "q", "zcu104")
    elapsed = time.process_time() - start
    assert elapsed < 1.0, f"generate_project({model}) took {elapsed:.2f} s of CPU"


@pytest.mark.parametrize("model", PROJECT_MODELS)
@pytest.mark.parametrize("board", BOARDS)
def test_project_files_and_names_agree(projects, model, board):
    _require_kernels(model)
    d = projects[model, board]
    graph = MODELS[model].build()
    for f in ("hls.tcl", "vivado.tcl", "Makefile", "README.md", "manifest.json", "graph.json",
              "csim/amp_csim.cpp", "kernels/boundary.cpp", "include/amp_kernels.h"):
        assert (d / f).is_file(), f
    manifest = json.loads((d / "manifest.json").read_text())
    tops = [k["top"] for k in manifest["kernels"]] + ["k_demux", "k_mux"]
    assert manifest["ip"]["tops"] == tops
    assert manifest["board"]["name"] == board and manifest["board"]["part"] == load_board(board).part
    assert manifest["board"]["dma"]["max_transfer_bytes"] == 2**26 - 1
    assert (manifest["dma"], manifest["dma_length_bits"]) == ("dma", 26)  # what host.pynq reads
    assert manifest["bitstream"] == {"basename": graph.name, "bit": f"{graph.name}.bit", "hwh": f"{graph.name}.hwh",
                                     "flow": "hls", "control": False}
    assert (d / "tb" / "amp_tb.cpp").is_file()  # hls.tcl's csim and cosim testbench
    hls_tcl = (d / "hls.tcl").read_text()
    assert re.findall(r"lappend amp_kernels \[list (\w+) (\S+)\]", hls_tcl) == [
        (k["top"], f"kernels/k_{k['node']}.cpp") for k in manifest["kernels"]
    ] + [("k_demux", "kernels/boundary.cpp"), ("k_mux", "kernels/boundary.cpp")]
    assert re.findall(r"lappend amp_kernels (\w+)$", (d / "vivado.tcl").read_text(), re.M) == tops
    assert f"set amp_part {load_board(board).part}" in hls_tcl
    makefile = (d / "Makefile").read_text()
    assert f"NAME      := {graph.name}" in makefile
    for src in re.findall(r"^\t(kernels/\S+) \\$", makefile, re.M):
        assert (d / src).is_file()
    assert str(d) not in hls_tcl + makefile + (d / "vivado.tcl").read_text()  # relocatable
    readme = (d / "README.md").read_text()
    assert "Vitis HLS and Vivado were not run" in readme and f"{graph.name}.hwh" in readme


@pytest.mark.parametrize("model", PROJECT_MODELS)
def test_the_manifest_records_what_the_bitstream_fixes(projects, model):
    """numerics, dump period, cache slots, instances in flight, parallelism, channels, flow: the
    model's training defaults unless given, the tag tables sized for them by the rule."""
    _require_kernels(model)
    spec = MODELS[model]
    for key, flow in (((model, "pynq-z2", "rtl"), "rtl"), ((model, "pynq-z2"), "hls")):
        manifest = json.loads((projects[key] / "manifest.json").read_text())
        assert manifest["flow"] == manifest["bitstream"]["flow"] == flow
        assert manifest["bitstream"]["control"] == (flow == "rtl")
        assert manifest["muf"] == spec.defaults["muf"] and manifest["max_in_flight"] == spec.defaults["mak"]
        per = 20 if model == "list-rnn" else 1  # a list leaves one message per element at a node
        assert manifest["cache_slots"] == manifest["max_in_flight"] * per
        assert manifest["numerics"]["data"] == {"width": 16, "frac": 10}
        assert manifest["parallelism"] == {n: 1 for n, k in zip(manifest["device_nodes"], manifest["kernels"])
                                           if k["kind"] == "linear"}
        assert [c["name"] for c in manifest["channels"]] == [c.name for c in place(spec.build()).channels]
        assert manifest["control"]["channel"] == 255
        link = manifest["host_link"]
        assert link["rx_buffer_bytes"] >= 2 * link["max_out_message_bytes"]
        assert link["packet_close_beats"] + link["max_out_message_bytes"] // 8 <= link["packet_limit_beats"]


@pytest.mark.parametrize("flow", FLOWS)
def test_the_boards_fifos_follow_the_rtls_rule(projects, flow):
    """One rule for FIFO depths: every stream's depth on the board (the hls flow's axis_data_fifo,
    the rtl flow's amp_fifo inside amp_top) is the RTL's 2**fifo_address_bits."""
    _require_kernels("list-rnn")
    d = projects[("list-rnn", "pynq-z2") if flow == "hls" else ("list-rnn", "pynq-z2", "rtl")]
    manifest = json.loads((d / "manifest.json").read_text())
    top = (d / "rtl" / "amp_top.sv").read_text()
    aw = re.findall(r"amp_fifo #\(\.AW\((\d+)\)\) u_fifo_(\w+) \(", top)
    assert {s["name"]: s["fifo_depth"] for s in manifest["streams"]} == {n: 2 ** int(a) for a, n in aw} \
        == manifest["fifo_depths"]
    slots = manifest["cache_slots"]
    links = {link.name: link for link in open_design(d).wiring.streams}
    assert any(link.deep for link in links.values())  # design.deep_streams
    for s in manifest["streams"]:
        link = links[s["name"]]
        if link.deep:  # every message that can be on it at once
            assert s["kind"] == "DATA" and s["fifo_depth"] >= slots * s["max_message_beats"], s
        elif link.dump_beats:  # a Linear's gradient input: what its writer sends during an inline dump
            assert s["fifo_depth"] == 2 ** dump_fifo_bits(link.dump_beats) > SMALL_FIFO, s
        else:
            assert s["fifo_depth"] == SMALL_FIFO, s
    if flow == "hls":
        tcl = (d / "vivado.tcl").read_text()
        depths = dict((n, int(v)) for n, v in re.findall(r"lappend amp_streams \[list (\w+) (\d+) ", tcl))
        assert depths == manifest["fifo_depths"]


def test_the_hls_flow_refuses_fifos_its_ip_cannot_be(tmp_path, capsys):
    _require_kernels("list-rnn")
    out = tmp_path / "p"
    assert main(["generate", "list-rnn", "-o", str(out), "--flow", "hls", "--cache-slots", "4000"]) == 2
    err = capsys.readouterr().err
    assert "at most 32768 beats" in err and "use --flow rtl" in err
    assert main(["generate", "list-rnn", "-o", str(out), "--cache-slots", "4000"]) == 0  # the rtl flow has no such limit


@pytest.mark.parametrize("board", BOARDS)
def test_the_rtl_flows_project_names_the_verified_rtl(projects, board):
    _require_kernels("mlp")
    d = projects["mlp", board, "rtl"]
    manifest = json.loads((d / "manifest.json").read_text())
    assert not (d / "hls.tcl").exists() and "ip" not in manifest
    rtl = manifest["rtl"]
    assert rtl["board_top"] == "amp_board"
    assert rtl["board_sources"] == [f"rtl/{f}" for f in rtl["sources"]] + ["board/amp_pack.sv", "board/amp_board.v"]
    tcl = (d / "vivado.tcl").read_text()
    assert re.findall(r"^lappend amp_rtl_sources (\S+)$", tcl, re.M) == rtl["board_sources"]
    wrapper = (d / "board" / "amp_board.v").read_text()
    for intf in ("host_in", "host_out"):
        for signal in ("TDATA", "TVALID", "TREADY", "TLAST", "TKEEP"):
            assert f'X_INTERFACE_INFO = "xilinx.com:interface:axis:1.0 {intf} {signal}"' in wrapper
    assert "ASSOCIATED_BUSIF host_in:host_out" in wrapper and "POLARITY ACTIVE_LOW" in wrapper
    readme = (d / "README.md").read_text()
    assert "bit-exact" in readme and "Vivado" in readme and "not verified" in readme.lower()
    assert "make ip" not in (d / "Makefile").read_text()


def test_regenerating_elsewhere_gives_the_same_project_files(projects, tmp_path):
    _require_kernels("mlp")
    other = tmp_path / "again"
    assert main(["generate", "mlp", "-o", str(other), "--board", "zcu104", "--no-fold"]) == 0  # rtl by default
    for f in ("vivado.tcl", "Makefile", "README.md", "manifest.json", "board/amp_board.v", "rtl/amp_top.sv"):
        assert (other / f).read_text() == (projects["mlp", "zcu104", "rtl"] / f).read_text(), f


# ----------------------------------------------------------------------------- tcl under stubs


@needs_tclsh
@pytest.mark.parametrize("model", PROJECT_MODELS)
@pytest.mark.parametrize("board", BOARDS)
def test_tcl_scripts_run_to_the_end_under_stubbed_tools(projects, stub_files, tmp_path, model, board):
    d = _project(projects, tmp_path, model, board)
    manifest = json.loads((d / "manifest.json").read_text())
    bd = load_board(board)
    tops = manifest["ip"]["tops"]

    # --- hls.tcl: every top opened, synthesised and exported, in that order, with the board's part
    log = tmp_path / "hls.log"
    run = _tcl(stub_files, d / "hls.tcl", log=log)
    assert run.returncode == 0, run.stderr
    assert f"exported {len(tops)} IP cores" in run.stdout
    calls = _calls(log)
    assert [c[1] for c in calls if c[0] == "set_top"] == tops
    assert sum(c[0] == "csynth_design" for c in calls) == len(tops)
    assert sum(c[0] == "export_design" for c in calls) == len(tops)
    assert not any(c[0] in ("csim_design", "cosim_design") for c in calls)
    per_top = " ".join(c[0] for c in calls).split("open_project")[1:]
    assert len(per_top) == len(tops)
    for top, seq in zip(tops, per_top, strict=True):  # every step, in order, for every top
        assert seq.split() == ["set_top", "add_files", "open_solution", "set_part", "create_clock",
                               "csynth_design", "export_design", "close_project"], top
        assert (d / "hls" / top / "sol" / "impl" / "ip" / "component.xml").is_file()
    assert {c[1] for c in calls if c[0] == "set_part"} == {bd.part}
    assert {c[2] for c in calls if c[0] == "create_clock"} == {"10.000"}
    for c in calls:
        if c[0] == "add_files":
            assert (d / c[1]).is_file(), c  # every referenced source exists
            assert c[2:4] == ["-cflags", f"-std=c++14 -I{d.resolve()}/include -DAMP_USE_XILINX_HEADERS"]
        if c[0] == "export_design":
            assert c[c.index("-vendor") + 1 :: 2][:3] == ["amphls", "hls", "1.0"]
    assert (d / "hls" / "ip.stamp").read_text().split() == tops

    # --- vivado.tcl: the block design, the runs, and NAME.bit + NAME.hwh with one basename
    log = tmp_path / "vivado.log"
    run = _tcl(stub_files, d / "vivado.tcl", log=log)
    assert run.returncode == 0, run.stderr
    name = manifest["bitstream"]["basename"]
    assert (d / f"{name}.bit").is_file() and (d / f"{name}.hwh").is_file()
    calls = _calls(log)
    assert ["create_project", "-force", name, "vivado", "-part", bd.part] in calls
    assert ["set_property", "board_part", f"{bd.board_part}:1.9", name] in calls
    cells = {c[-1]: c[c.index("-vlnv") + 1] for c in calls if c[0] == "create_bd_cell"}
    ps = "processing_system7" if bd.ps == "zynq7" else "zynq_ultra_ps_e"
    assert cells["ps"] == f"xilinx.com:ip:{ps}:9.9" and cells[manifest["dma"]] == "xilinx.com:ip:axi_dma:9.9"
    for top in tops:
        assert cells[top] == f"amphls:hls:{top}:1.0"
    dma_config = next(c for c in calls if c[0] == "set_property" and c[-1] == "dma")
    assert "CONFIG.c_include_sg 0" in " ".join(dma_config) and "CONFIG.c_sg_length_width 26" in " ".join(dma_config)

    # One FIFO per C-sim stream, joining exactly the kernel ports the C-sim driver joins.
    streams, port_stream = _csim_wiring(d)
    fifos = {c[-1] for c in calls if c[0] == "create_bd_cell" and "axis_data_fifo" in c[c.index("-vlnv") + 1]}
    assert fifos == {f"fifo_{s}" for s in streams}
    links = [tuple(c[1:]) for c in calls if c[0] == "connect_bd_intf_net"]
    assert len(links) == len(set(links))
    for s in streams:
        into = [a for a, b in links if b == f"fifo_{s}/S_AXIS"]
        out_of = [b for a, b in links if a == f"fifo_{s}/M_AXIS"]
        assert len(into) == 1 and len(out_of) == 1, s
        assert port_stream[into[0]] == s and port_stream[out_of[0]] == s
    kernel_ends = [p for link in links for p in link if p.split("/")[0] in tops]
    assert sorted(kernel_ends) == sorted(port_stream)  # every kernel port exactly once (host_in/out too)
    assert ("dma/M_AXIS_MM2S", "k_demux/host_in") in links
    assert ("k_mux/host_out", "dma/S_AXIS_S2MM") in links
    nets = [c[1:] for c in calls if c[0] == "connect_bd_net"]
    for top in tops:
        assert sum(f"{top}/ap_clk" in n for n in nets) == 1
        assert sum(f"{top}/ap_rst_n" in n and n[0] == "rst/peripheral_aresetn" for n in nets) == 1
    order = [c[0] for c in calls]
    for before, after in [("connect_bd_net", "validate_bd_design"), ("validate_bd_design", "make_wrapper"),
                          ("make_wrapper", "launch_runs")]:
        assert max(i for i, c in enumerate(order) if c == before) < order.index(after)
    assert ["launch_runs", "impl_1", "-jobs", "4", "-to_step", "write_bitstream"] in calls
    assert f"wrote {name}.bit and {name}.hwh" in run.stdout


@needs_tclsh
def test_hls_tcl_runs_csim_and_cosim_with_the_generated_testbench(projects, stub_files, tmp_path):
    d = _project(projects, tmp_path, "mlp", "pynq-z2")
    manifest = json.loads((d / "manifest.json").read_text())
    tops = manifest["ip"]["tops"]
    source = {k["top"]: f"kernels/{k['top']}.cpp" for k in manifest["kernels"]} | \
        {"k_demux": "kernels/boundary.cpp", "k_mux": "kernels/boundary.cpp"}
    log = tmp_path / "hls.log"
    run = _tcl(stub_files, d / "hls.tcl", "csim", "cosim", log=log)
    assert run.returncode == 0, run.stderr
    calls = _calls(log)
    assert sum(c[0] == "csim_design" for c in calls) == sum(c[0] == "cosim_design" for c in calls) == len(tops)
    segments: dict[str, list[list[str]]] = {}
    for c in calls:
        if c[0] == "set_top":
            segments[c[1]] = []
        elif c[0] == "add_files" and segments:
            segments[list(segments)[-1]].append(c)
    for top in tops:
        design = [c[1] for c in segments[top] if c[1] != "-tb"]
        bench = {c[2]: c[4] for c in segments[top] if c[1] == "-tb"}
        assert design == [source[top]]  # what is synthesised: the top's own source
        assert bench["tb/amp_tb.cpp"].endswith(f"-DAMP_TB_TOP_{top}")  # the top called as itself
        assert set(bench) - {"tb/amp_tb.cpp"} == set(source.values()) - {source[top]}  # the rest, as testbench
    (d / "tb" / "amp_tb.cpp").unlink()
    run = _tcl(stub_files, d / "hls.tcl", "csim", log=tmp_path / "again.log")
    assert run.returncode == 1 and "no testbench tb/amp_tb.cpp" in run.stderr


@needs_tclsh
@pytest.mark.parametrize("model", PROJECT_MODELS)
@pytest.mark.parametrize("board", BOARDS)
def test_the_rtl_flows_vivado_tcl_instantiates_the_verified_rtl(projects, stub_files, tmp_path, model, board):
    d = _project(projects, tmp_path, model, board, "rtl")
    manifest = json.loads((d / "manifest.json").read_text())
    bd = load_board(board)
    log = tmp_path / "vivado.log"
    run = _tcl(stub_files, d / "vivado.tcl", log=log)
    assert run.returncode == 0, run.stderr
    name = manifest["bitstream"]["basename"]
    assert (d / f"{name}.bit").is_file() and (d / f"{name}.hwh").is_file()
    calls = _calls(log)
    added = [c for c in calls if c[0] == "add_files"]
    assert len(added) == 2 and added[0][1] == "-norecurse" and added[1][2].endswith("amp_bd_wrapper.v")
    assert added[0][2].split() == [str(d.resolve() / f) for f in manifest["rtl"]["board_sources"]]
    assert not any(c[0] in ("update_ip_catalog", "set_top") for c in calls)  # no HLS cores
    cells = {c[-1]: c for c in calls if c[0] == "create_bd_cell"}
    assert cells["amp"][1:5] == ["-type", "module", "-reference", "amp_board"]
    ps = "processing_system7" if bd.ps == "zynq7" else "zynq_ultra_ps_e"
    assert cells["ps"][cells["ps"].index("-vlnv") + 1] == f"xilinx.com:ip:{ps}:9.9"
    assert not any("axis_data_fifo" in " ".join(c) for c in cells.values())  # the FIFOs are amp_top's
    links = [tuple(c[1:]) for c in calls if c[0] == "connect_bd_intf_net"]
    assert ("dma/M_AXIS_MM2S", "amp/host_in") in links and ("amp/host_out", "dma/S_AXIS_S2MM") in links
    nets = [c[1:] for c in calls if c[0] == "connect_bd_net"]
    assert sum("amp/ap_clk" in n for n in nets) == 1
    assert sum("amp/ap_rst_n" in n and n[0] == "rst/peripheral_aresetn" for n in nets) == 1
    assert ["launch_runs", "impl_1", "-jobs", "4", "-to_step", "write_bitstream"] in calls


@needs_tclsh
def test_the_stubs_catch_a_missing_file_an_undefined_module_and_an_unknown_ip(projects, stub_files, tmp_path):
    d = _project(projects, tmp_path, "mlp", "pynq-z2", "rtl")
    wrapper = d / "board" / "amp_board.v"
    text = wrapper.read_text()
    wrapper.write_text(text.replace("module amp_board (", "module amp_board_renamed ("))
    run = _tcl(stub_files, d / "vivado.tcl", log=tmp_path / "a.log")
    assert run.returncode == 1 and "module amp_board is not defined in any added file" in run.stderr
    wrapper.write_text(text.replace('axis:1.0 host_out TDATA', 'axis:1.0 result TDATA'))
    run = _tcl(stub_files, d / "vivado.tcl", log=tmp_path / "b.log")
    assert run.returncode == 1 and "no interface amp/host_out in the block design" in run.stderr
    wrapper.write_text(text)
    (d / "rtl" / "k_fc0.sv").unlink()
    run = _tcl(stub_files, d / "vivado.tcl", log=tmp_path / "c.log")
    assert run.returncode == 1 and "missing RTL source rtl/k_fc0.sv" in run.stderr
    stub = Path(stub_files["AMP_STUB_TCL"]).read_text()
    assert "error \"add_files: no such file $g\"" in stub  # and an add_files of it would fail too
    tcl = (d / "vivado.tcl").read_text().replace("xilinx.com:ip:axi_dma", "xilinx.com:ip:axi_dma_lite")
    (d / "rtl" / "k_fc0.sv").write_text("")
    (d / "vivado.tcl").write_text(tcl)
    run = _tcl(stub_files, d / "vivado.tcl", log=tmp_path / "d.log")
    assert run.returncode == 1 and "IP xilinx.com:ip:axi_dma_lite is not in the IP catalog" in run.stderr


@needs_tclsh
@pytest.mark.parametrize("env, args, script, message", [
    ({"AMP_STUB_FAIL": "csynth_design"}, (), "hls", "k_fc0: csynth_design failed: csynth_design: stubbed tool failure"),
    ({"AMP_STUB_FAIL": "export_design"}, (), "hls", "k_fc0: export_design failed"),
    ({"AMP_STUB_FAIL": "csim_design"}, ("csim",), "hls", "k_fc0: csim_design failed"),
    ({"AMP_STUB_FAIL": "cosim_design"}, ("cosim",), "hls", "k_fc0: cosim_design failed"),
    ({}, ("bogus",), "hls", "unknown argument 'bogus'"),
    ({"AMP_STUB_FAIL": "validate_bd_design"}, (), "vivado", "validate_bd_design failed"),
    ({"AMP_STUB_FAIL": "connect_bd_intf_net"}, (), "vivado", "failed: connect_bd_intf_net: stubbed"),
    ({"AMP_STUB_SYNTH_STATUS": "synth_design ERROR"}, (), "vivado", "synth_1 did not complete (status 'synth_design ERROR'"),
    ({"AMP_STUB_WNS": "-0.412"}, (), "vivado", "timing not met at 100 MHz (WNS -0.412 ns"),
    ({"AMP_STUB_WNS": ""}, (), "vivado", "impl_1 reports no timing"),
    ({"AMP_STUB_NO_BOARD": "1"}, (), "vivado", "board files for tul.com.tw:pynq-z2:part0 are not installed"),
    ({}, ("jobs=0",), "vivado", "unknown argument 'jobs=0'"),
])
def test_every_failure_stops_the_script_with_a_message(projects, stub_files, tmp_path, env, args, script, message):
    d = _project(projects, tmp_path, "mlp", "pynq-z2")
    if script == "vivado":
        assert _tcl(stub_files, d / "hls.tcl", log=tmp_path / "hls.log").returncode == 0
    log = tmp_path / "run.log"
    run = _tcl(stub_files, d / f"{script}.tcl", *args, log=log, **env)
    assert run.returncode == 1
    assert message in run.stderr, run.stderr
    assert "wrote mlp.bit" not in run.stdout and not (d / "mlp.bit").exists()
    calls = _calls(log)
    if env.get("AMP_STUB_FAIL"):  # stopped at the first failure
        assert calls[-1][0] == env["AMP_STUB_FAIL"]


@needs_tclsh
def test_vivado_tcl_needs_the_exported_ip_and_can_skip_board_files(projects, stub_files, tmp_path):
    d = _project(projects, tmp_path, "mlp", "pynq-z2")
    run = _tcl(stub_files, d / "vivado.tcl", log=tmp_path / "a.log")
    assert run.returncode == 1 and "run `make ip`" in run.stderr
    assert _tcl(stub_files, d / "hls.tcl", log=tmp_path / "b.log").returncode == 0
    log = tmp_path / "c.log"
    run = _tcl(stub_files, d / "vivado.tcl", "part_only", "allow_timing_failure", "jobs=8", log=log,
               AMP_STUB_NO_BOARD="1", AMP_STUB_WNS="-0.1")
    assert run.returncode == 0, run.stderr
    calls = _calls(log)
    assert not any(c[:2] == ["set_property", "board_part"] for c in calls)
    automation = next(c for c in calls if c[0] == "apply_bd_automation")
    assert "apply_board_preset 0" in " ".join(automation)
    assert ["launch_runs", "synth_1", "-jobs", "8"] in calls


# -------------------------------------------------------------------------------- Makefile


@needs_make
def test_makefile_targets_run_the_scripts_and_check_every_status(projects, stub_files, tmp_path):
    d = _project(projects, tmp_path, "mlp", "kv260")
    dry = subprocess.run([MAKE, "-n", "bitstream"], cwd=d, capture_output=True, text=True, timeout=30)
    assert dry.returncode == 0, dry.stderr
    assert "vitis_hls -f hls.tcl" in dry.stdout
    assert "vivado -mode batch -nojournal -log vivado.log -source vivado.tcl -tclargs jobs=4" in dry.stdout
    assert "amp-hls csim ." in subprocess.run([MAKE, "-n", "csim"], cwd=d, capture_output=True, text=True).stdout
    makefile = (d / "Makefile").read_text()
    assert not re.search(r"^\t-", makefile, re.M)  # no ignored errors

    # The tools are missing: a clear message, a failed make.
    env = {**os.environ, "PATH": "/usr/bin:/bin"}
    run = subprocess.run([MAKE, "ip"], cwd=d, capture_output=True, text=True, timeout=30, env=env)
    assert run.returncode != 0 and "vitis_hls is not on PATH" in run.stderr

    # Fake vitis_hls / vivado that run the stubs: a failing tool fails make, and leaves no stamp.
    env = {**os.environ, "PATH": f"{stub_files['bin']}:{os.environ['PATH']}",
           "AMP_STUB_DRIVER": stub_files["AMP_STUB_DRIVER"], "AMP_STUB_TCL": stub_files["AMP_STUB_TCL"],
           "AMP_STUB_LOG": str(tmp_path / "m.log")}
    run = subprocess.run([MAKE, "ip"], cwd=d, capture_output=True, text=True, timeout=60,
                         env={**env, "AMP_STUB_FAIL": "csynth_design"})
    assert run.returncode != 0 and "csynth_design failed" in run.stderr
    assert not (d / "hls" / "ip.stamp").exists()
    run = subprocess.run([MAKE, "bitstream", "VIVADO=no-such-vivado"], cwd=d, capture_output=True,
                         text=True, timeout=60, env=env)
    assert run.returncode != 0 and "no-such-vivado is not on PATH" in run.stderr
    assert (d / "hls" / "ip.stamp").is_file() and not (d / "mlp.bit").exists()
    run = subprocess.run([MAKE, "bitstream", "JOBS=2"], cwd=d, capture_output=True, text=True, timeout=60, env=env)
    assert run.returncode == 0, run.stderr
    assert (d / "mlp.bit").is_file() and (d / "mlp.hwh").is_file()
    assert ["launch_runs", "synth_1", "-jobs", "2"] in _calls(tmp_path / "m.log")
    again = subprocess.run([MAKE, "bitstream"], cwd=d, capture_output=True, text=True, timeout=60, env=env)
    assert again.returncode == 0 and "vivado" not in again.stdout  # up to date: nothing reruns
    run = subprocess.run([MAKE, "clean"], cwd=d, capture_output=True, text=True, timeout=30)
    assert run.returncode == 0
    assert not (d / "hls").exists() and not (d / "mlp.bit").exists() and (d / "hls.tcl").is_file()


@needs_make
def test_the_rtl_flows_makefile_builds_the_bitstream_with_vivado_alone(projects, stub_files, tmp_path):
    d = _project(projects, tmp_path, "mlp", "pynq-z2", "rtl")
    dry = subprocess.run([MAKE, "-n", "bitstream"], cwd=d, capture_output=True, text=True, timeout=30)
    assert dry.returncode == 0, dry.stderr
    assert "vitis_hls" not in dry.stdout and "vivado -mode batch" in dry.stdout
    assert "amp-hls deploy . -o deploy" in subprocess.run([MAKE, "-n", "deploy"], cwd=d, capture_output=True,
                                                          text=True).stdout
    env = {**os.environ, "PATH": f"{stub_files['bin']}:{os.environ['PATH']}",
           "AMP_STUB_DRIVER": stub_files["AMP_STUB_DRIVER"], "AMP_STUB_TCL": stub_files["AMP_STUB_TCL"],
           "AMP_STUB_LOG": str(tmp_path / "m.log")}
    run = subprocess.run([MAKE, "bitstream"], cwd=d, capture_output=True, text=True, timeout=60, env=env)
    assert run.returncode == 0, run.stderr
    assert (d / "mlp.bit").is_file() and (d / "mlp.hwh").is_file()
    (d / "rtl" / "k_fc0.sv").write_text((d / "rtl" / "k_fc0.sv").read_text() + "\n")
    again = subprocess.run([MAKE, "-n", "bitstream"], cwd=d, capture_output=True, text=True, timeout=30, env=env)
    assert "vivado -mode batch" in again.stdout  # a changed RTL source rebuilds the bitstream


# ------------------------------------------------------------------- injection, C++, csim CLI


@pytest.mark.parametrize("evil", [
    "fc0]; exec touch pwned; #",
    "$(touch pwned)",
    "fc0\nputs pwned",
    "exec",
    "fc0 ; rm -rf ~",
    "ap_clk",
    "{*}[exec id]",
])
def test_names_that_smuggle_tcl_or_shell_are_rejected_before_anything_is_written(tmp_path, capsys, evil):
    doc = json.loads(dumps(MODELS["mlp"].build()))
    old = "fc0"
    for node in doc["nodes"]:
        if node["name"] == old:
            node["name"] = evil
    for edge in doc["edges"]:
        for end in ("src", "dst"):
            node, port = edge[end].split(".")
            if node == old:
                edge[end] = f"{evil}.{port}"
    path = tmp_path / "evil.json"
    path.write_text(json.dumps(doc))
    out = tmp_path / "out"
    assert main(["generate", str(path), "-o", str(out), "--board", "pynq-z2"]) == 2
    err = capsys.readouterr().err
    assert "amp-hls: error:" in err
    assert not out.exists() and not (tmp_path / "pwned").exists()
    with pytest.raises(IRError):  # names are validated while the graph is read
        graph_from_json(doc)


def test_graph_name_is_checked_too(tmp_path):
    doc = json.loads(dumps(MODELS["mlp"].build()))
    doc["name"] = "mlp; exec rm"
    path = tmp_path / "evil.json"
    path.write_text(json.dumps(doc))
    run = _cli("generate", str(path), "-o", str(tmp_path / "out"))
    assert run.returncode == 2 and "graph name" in run.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.gxx
@pytest.mark.parametrize("model", PROJECT_MODELS)
def test_generated_cpp_compiles_warning_free_and_csim_cli_loads_it(projects, model, capsys):
    _require_kernels(model)
    d = projects[model, "pynq-z2"]
    lib = build_csim(open_project(d))  # g++ -Wall -Wextra -Werror -Wno-unknown-pragmas
    assert lib.is_file()
    assert main(["csim", str(d)]) == 0
    out = capsys.readouterr().out
    assert str(lib) in out and "reset and idle: ok" in out
    # hls.tcl hands Vitis the kernels with its own -std: they must be valid in that dialect too.
    std = re.search(r"-std=(c\+\+\d+)", (d / "hls.tcl").read_text()).group(1)
    for src in sorted((d / "kernels").glob("*.cpp")):
        run = subprocess.run(["g++", f"-std={std}", "-fsyntax-only", "-Wall", "-Wextra", "-Werror",
                              "-Wno-unknown-pragmas", f"-I{d / 'include'}", str(src)],
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr


@pytest.mark.gxx
def test_csim_cli_reports_compiler_errors_and_non_projects(projects, tmp_path, capsys):
    _require_kernels("mlp")
    d = tmp_path / "broken"
    shutil.copytree(projects["mlp", "pynq-z2"], d, ignore=shutil.ignore_patterns("build"))
    with (d / "kernels" / "k_fc0.cpp").open("a") as f:
        f.write("\nthis is not C++;\n")
    assert main(["csim", str(d)]) == 2
    err = capsys.readouterr().err
    assert "g++ failed to build the C simulation" in err and "k_fc0.cpp" in err
    assert main(["csim", str(tmp_path / "nowhere")]) == 2
    assert "not an amp-hls project" in capsys.readouterr().err
