"""The lowered device design -> HLS C++ project: one free-running streaming kernel per device node.

Layout of a generated project::

    include/   amp_wire.h, amp_numerics.h (generated from Python), amp_stream.h, amp_kernel.h
               (copied from hw/include), amp_kernels.h (declarations, generated)
    kernels/   k_<node>.cpp per device node, boundary.cpp (k_demux, k_mux)
    csim/      amp_csim.cpp: the C simulation driver (a shared library for the host)
    manifest.json, graph.json

Streams, kernel ports and boundary routes all come from ``amp_hls.design.DeviceDesign``: the
C-sim driver, the RTL and the board project's block design read the same description.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..control import control_constants
from ..design import DeviceDesign, DeviceOptions
from ..errors import AmpHlsError
from ..numerics import loss_tables
from ..placement import Placement
from ..resources import hw_dir
from ..wire import Kind, elements_per_beat
from .headers import render_numerics_header, render_wire_header
from .jinja import environment

SUPPORT_HEADERS = ("amp_stream.h", "amp_kernel.h")


@dataclass(frozen=True)
class HlsProject:
    root: Path
    design: DeviceDesign
    kernel_files: tuple[Path, ...]

    @property
    def placement(self) -> Placement:
        return self.design.placement

    @property
    def options(self) -> DeviceOptions:
        return self.design.options

    @property
    def include_dir(self) -> Path:
        return self.root / "include"

    @property
    def csim_sources(self) -> tuple[Path, ...]:
        return (*self.kernel_files, self.root / "csim" / "amp_csim.cpp")


def _signature(ports: list[str] | tuple[str, ...]) -> str:
    return ", ".join(f"amp::Stream& {p}" for p in ports)


def generate_hls(design: DeviceDesign, out_dir: str | Path) -> HlsProject:
    """Write the HLS C++ sources of ``design`` into ``out_dir`` (created; files overwritten).
    The caller writes the manifest (``DeviceDesign.write_manifest``) once the project is whole."""
    root = Path(out_dir)
    for sub in ("include", "kernels", "csim"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    env = environment()
    options, wires = design.options, design.wiring

    (root / "include" / "amp_wire.h").write_text(render_wire_header())
    (root / "include" / "amp_numerics.h").write_text(render_numerics_header(options.numerics))
    for name in SUPPORT_HEADERS:
        shutil.copyfile(hw_dir() / "include" / name, root / "include" / name)

    demux_ports, mux_ports = wires.demux_ports, wires.mux_ports
    common: dict[str, Any] = dict(
        graph_name=design.graph.name,
        demux_routes=list(wires.demux_routes),
        mux_routes=list(wires.mux_routes),
        demux_ports=demux_ports,
        mux_ports=mux_ports,
        demux_signature=_signature(demux_ports),
        mux_signature=_signature(mux_ports),
        demux_args=", ".join(demux_ports),
        mux_args=", ".join(mux_ports),
        options=options,
        control=control_constants(),  # the C-sim driver's control unit (amp_hls.control)
        beat_lanes=elements_per_beat(Kind.DATA),  # a row kernel's loops take one DATA beat a cycle
    )

    kernels, files = [], []
    for kernel in design.nodes.values():
        ctx = dict(
            common,
            node=kernel.node,
            fn=kernel.top,
            ns=f"n_{kernel.name}",
            ports=list(kernel.ports),
            signature=_signature(kernel.ports),
            in_specs=list(kernel.in_specs),
            out_specs=list(kernel.out_specs),
            skip_dx=kernel.skip_dx,  # a Linear fed by a host source sends no in0_grad (design.skips_dx)
            loss_tables=loss_tables(options.numerics.data),  # a Loss kernel's exp/log tables
        )
        if kernel.row.hls_template is None:
            raise AmpHlsError(f"no HLS kernel for node kind {kernel.node.kind!r} (node '{kernel.name}')")
        path = root / "kernels" / f"{kernel.top}.cpp"
        path.write_text(env.get_template(kernel.row.hls_template).render(**ctx))
        files.append(path)
        kernels.append(dict(fn=kernel.top, signature=ctx["signature"], args=", ".join(kernel.streams)))
    boundary = root / "kernels" / "boundary.cpp"
    boundary.write_text(env.get_template("hls/boundary.cpp.j2").render(**common))
    files.append(boundary)
    ctx = dict(common, kernels=kernels, streams=[link.name for link in wires.streams])
    (root / "include" / "amp_kernels.h").write_text(env.get_template("hls/amp_kernels.h.j2").render(**ctx))
    (root / "csim" / "amp_csim.cpp").write_text(env.get_template("hls/amp_csim.cpp.j2").render(**ctx))
    return HlsProject(root, design, tuple(files))
