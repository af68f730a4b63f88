"""The table of node kinds is complete: every IR kind has a row, and every row's parts exist.

A kind added to the IR without a row, a row naming a template or cycle model that is not there,
or a cycle model without ``message_cycles`` fails here, before any executor meets the kind.
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest

import amp_hls.cycles as cycles
from amp_hls.errors import AmpHlsError, KernelError
from amp_hls.ir import NODE_KINDS, Graph
from amp_hls.kernels import Kernel
from amp_hls.kinds import KINDS, cycle_model, device_kinds, kind_row, make_kernel
from amp_hls.numerics import NumericConfig
from amp_hls.resources import templates_dir

HOST_ONLY = {"source", "sink"}


def test_every_ir_kind_has_exactly_one_row() -> None:
    assert set(KINDS) == set(NODE_KINDS)
    for kind, row in KINDS.items():
        assert row.kind == kind
        assert row.ir is NODE_KINDS[kind]


@pytest.mark.parametrize("kind", sorted(NODE_KINDS))
def test_a_row_names_parts_that_exist(kind: str) -> None:
    row = kind_row(kind)
    assert issubclass(row.kernel, Kernel) and row.kernel.kind == kind
    assert row.device == (kind not in HOST_ONLY)
    for template in (row.hls_template, row.rtl_template):
        if row.device:
            assert template is not None and (templates_dir() / template).is_file(), template
        else:
            assert template is None
    if row.device:
        model = cycle_model(kind)
        params = inspect.signature(model.message_cycles).parameters
        assert list(params)[:6] == ["node", "in_specs", "out_specs", "options", "port", "rows"], model.__name__
        extra = list(params)[6:]  # the one optional flag a kernel that can leave out dx takes
        assert extra in ([], ["skip_dx"]), model.__name__
        assert all(params[p].default is False for p in extra), model.__name__
        assert (extra == ["skip_dx"]) == (kind in ("linear", "loss")), model.__name__
    else:
        with pytest.raises(AmpHlsError, match="no cycle model"):
            cycle_model(kind)


def test_no_template_or_cycle_model_without_a_row() -> None:
    """A stray template or model (a kind half added, or half removed) is caught too."""
    hls = {p.name.removesuffix(".cpp.j2") for p in (templates_dir() / "hls" / "kernels").glob("*.cpp.j2")}
    rtl = {p.name.removesuffix(".sv.j2") for p in (templates_dir() / "rtl" / "kernels").glob("*.sv.j2")}
    assert hls == rtl == set(device_kinds())
    modules = (importlib.import_module(f"amp_hls.cycles.{p.stem}")
               for p in Path(cycles.__file__).parent.glob("*.py") if p.stem != "__init__")
    models = {m.__name__.rpartition(".")[2] for m in modules  # modules that offer a model, not just use one
              if getattr(getattr(m, "message_cycles", None), "__module__", None) == m.__name__
              or "message_cycles" in getattr(m, "__all__", ())}
    assert models == set(device_kinds())


def test_unknown_kinds_are_named() -> None:
    with pytest.raises(AmpHlsError, match="unknown node kind 'nope'; known: activation"):
        kind_row("nope")
    g = Graph("k")
    x = g.source("x", width=2)
    g.sink(x, name="y")
    node = g.node("y")
    object.__setattr__(node, "kind", "nope")  # an instance whose kind no row knows
    with pytest.raises(KernelError, match="node 'y': no kernel for node kind 'nope'"):
        make_kernel(node, g, NumericConfig("float"))


def test_parameters_come_from_the_ir_node() -> None:
    """Which kinds carry parameters is the IR's ``param_shapes``, and only their kernels train."""
    from amp_hls.kernels import ParamKernel

    g = Graph("p")
    x = g.source("x", width=3)
    g.loss(g.tanh(g.linear(x, 2, name="fc"), name="act"), g.source("t", width=2), "mse")
    for name, node in g.nodes.items():
        kernel = make_kernel(node, g, NumericConfig("float"))
        assert isinstance(kernel, ParamKernel) == bool(node.param_shapes()), name
