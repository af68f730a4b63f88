"""A graph as C++ for the native runtime: per node its kernel with the widths as template
arguments, the routes between inboxes, the saturation sites and the lookup tables, rendered
through the project's Jinja environment from ``templates/native/``.

The numbering here is the one the Python side reads the library by: nodes in graph order,
parameter nodes, sources and loss nodes in graph order among them, saturation sites in
``NativeGraph.sites`` order, inboxes per node forward ports first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..codegen.jinja import environment
from ..errors import AmpHlsError
from ..ir import GraphCore
from ..ir.nodes import (
    COMPARISONS,
    Activation,
    Add,
    Aggregate,
    Broadcast,
    Concat,
    Cond,
    Isu,
    Linear,
    Loss,
    Mul,
    Phi,
    RowSum,
    Sink,
    Source,
    Split,
    Ungroup,
)
from ..message import MAX_STATE_VALUE, MAX_STATE_WORDS, STATE_SPACE
from ..numerics import ACC_MAX, ACC_MIN, NumericConfig, activation_table, loss_tables
from ..runtime.optim import OPTIMIZERS

# the node kinds the native runtime has kernels for (docs/native.md)
NATIVE_KINDS = ("source", "sink", "linear", "activation", "ungroup", "phi", "concat", "split", "broadcast", "add",
                "mul", "aggregate", "rowsum", "isu", "cond", "loss")
TEMPLATES = ("amp_native.h", "amp_kernels.h", "amp_run.h", "graph.cpp")
# Message payload blocks a thread keeps for reuse, per power-of-two size class (amp_native.h's
# pool); the rest go back to the heap, so a worker that frees more than it allocates keeps at
# most this much a class (20 classes).
POOL_CLASS_BYTES = 4 << 20


class NativeUnsupported(AmpHlsError):
    """The graph has a node kind (or a use of one) the native runtime does not run yet."""


@dataclass
class NativeGraph:
    """The generated sources (file name -> text) and the numbering they fix."""

    sources: dict[str, str]
    nodes: list[str]
    param_nodes: list[str]
    source_nodes: list[str]
    loss_nodes: list[str]
    sites: list[str] = field(default_factory=list)


def unsupported_kinds(graph: GraphCore) -> list[str]:
    """The node kinds of ``graph`` the native runtime has no kernel for (sorted; empty: it runs)."""
    return sorted({node.kind for node in graph.nodes.values()} - set(NATIVE_KINDS))


def _cpp_bool(v: bool) -> str:
    return "true" if v else "false"


def _precision(p: Any) -> dict[str, int]:
    return {"frac": p.frac, "qmin": p.qmin, "qmax": p.qmax, "one": p.one}


def generate(graph: GraphCore, numerics: NumericConfig) -> NativeGraph:
    """The C++ of ``graph`` under ``numerics``; ``NativeUnsupported`` names a node it cannot run."""
    graph.validate()
    names = list(graph.nodes)
    index = {n: i for i, n in enumerate(names)}
    sites: list[str] = []

    def site(name: str) -> int:
        sites.append(name)
        return len(sites) - 1

    decls, tables, conds, isus = [], [], [], []
    params, sources, losses = [], [], []
    for name, node in graph.nodes.items():
        if node.kind not in NATIVE_KINDS:
            raise NativeUnsupported(f"node '{name}': the native backend has no {node.kind} kernel yet "
                                    f"(it runs {', '.join(NATIVE_KINDS)}); use --backend cpu")
        in_specs = [graph.input_spec(name, i) for i in range(node.n_inputs)]
        if isinstance(node, Source):
            decls.append(("Source", f'"{name}", {node.width}, {_cpp_bool(node.dtype == "index")}, {site(f"{name}.in")}'))
            sources.append(name)
        elif isinstance(node, Sink):
            decls.append((f"Sink<{in_specs[0].width}>", f'"{name}"'))
        elif isinstance(node, Linear):
            w = site(f"{name}.weight.q")
            b = site(f"{name}.bias.q") if node.bias else -1
            rest = ", ".join(str(site(f"{name}.{s}")) for s in ("acc", "fwd", "grad_acc", "bwd_acc", "bwd"))
            decls.append((f"Linear<{node.in_features}, {node.out_features}, {_cpp_bool(node.bias)}>",
                          f'"{name}", {w}, {b}, {rest}'))
            params.append(name)
        elif isinstance(node, Activation):
            fn = {"relu": "RELU", "tanh": "TANH", "sigmoid": "SIGMOID"}[node.fn]
            if numerics.fixed and node.fn != "relu":
                t = activation_table(node.fn, numerics.data)
                tables.append({"node": name, "entries": list(t.values)})
                table = f"Table{{{t.shift}, {t.lo}, {t.hi}, TABLE_{name}}}"
            else:
                table = "Table{0, 0, 0, nullptr}"
            decls.append((f"Activation<{in_specs[0].width}, {fn}>", f'"{name}", {table}, {site(f"{name}.bwd")}'))
        elif isinstance(node, Ungroup):
            decls.append((f"Ungroup<{in_specs[0].width}>", f'"{name}", {in_specs[0].max_rows}'))
        elif isinstance(node, Phi):
            decls.append(("Phi", f'"{name}"'))
        elif isinstance(node, Concat):
            widths = ", ".join(str(s.width) for s in in_specs)
            decls.append((f"Concat<{node.n_inputs}>", f'"{name}", {{{widths}}}'))
        elif isinstance(node, Split):
            widths = ", ".join(str(w) for w in node.sizes)
            decls.append((f"Split<{len(node.sizes)}>", f'"{name}", {{{widths}}}'))
        elif isinstance(node, Broadcast):
            carries_index = _cpp_bool(in_specs[0].dtype == "index")
            decls.append((f"Broadcast<{node.arity}, {carries_index}>", f'"{name}", {site(f"{name}.bwd")}'))
        elif isinstance(node, Add):
            decls.append((f"Add<{node.n_inputs}>", f'"{name}", {site(f"{name}.fwd")}'))
        elif isinstance(node, Mul):
            rest = ", ".join(str(site(f"{name}.{s}")) for s in ("fwd", "bwd_prod", "bwd"))
            decls.append((f"Mul<{node.n_inputs}>", f'"{name}", {rest}'))
        elif isinstance(node, Aggregate):
            decls.append((f"Aggregate<{in_specs[0].width}>", f'"{name}", {site(f"{name}.fwd")}, {site(f"{name}.bwd")}'))
        elif isinstance(node, RowSum):
            decls.append((f"RowSum<{in_specs[0].width}>", f'"{name}", {site(f"{name}.fwd")}'))
        elif isinstance(node, Cond):
            p = node.predicate
            rhs = f"t.s[{p.rhs_state}]" if p.rhs_state is not None else str(p.rhs_const)
            need = max(p.index, p.rhs_state if p.rhs_state is not None else 0)
            conds.append({"node": name, "index": p.index, "op": COMPARISONS[p.op][1], "rhs": rhs, "need": need,
                          "text": str(p)})
            decls.append(("Cond", f'"{name}", pred_{name}'))
        elif isinstance(node, Isu):
            def ops(seq: Any) -> list[dict[str, Any]]:
                return [{"op": o.op, "index": o.index, "value": o.value, "text": f"{o.op} {o.index} {o.value}"}
                        for o in seq]
            isus.append({"node": name, "forward": ops(node.ops),
                         "backward": ops(op.inverse() for op in reversed(node.ops))})
            decls.append(("Isu", f'"{name}", isu_fwd_{name}, isu_bwd_{name}'))
        elif isinstance(node, Loss):
            if node.fn not in ("softmax_ce", "mse"):
                raise NativeUnsupported(f"node '{name}': the native backend has no {node.fn} loss")
            feeding = graph.edge_into(name, 0)
            predictor = feeding.src.node if feeding is not None else "?"
            decls.append((f"Loss<{in_specs[0].width}, {in_specs[1].width}, {_cpp_bool(node.fn == 'mse')}>",
                          f'"{name}", "{predictor}", {site(f"{name}.bwd")}'))
            losses.append(name)

    # inboxes: per node, forward ports (inputs) then backward ports (outputs)
    inbox_node, inbox_dir, inbox_port = [], [], []
    inbox_of: dict[tuple[str, int, int], int] = {}
    for name, node in graph.nodes.items():
        for direction, ports in ((0, node.n_inputs), (1, node.n_outputs)):
            for port in range(ports):
                inbox_of[(name, direction, port)] = len(inbox_node)
                inbox_node.append(index[name])
                inbox_dir.append(direction)
                inbox_port.append(port)
    fwd_route, bwd_route = [], []
    for name, node in graph.nodes.items():
        fwd, bwd = [], []
        for i in range(node.n_outputs):
            edge = graph.edge_from(name, i)
            assert edge is not None
            fwd.append(inbox_of[(edge.dst.node, 0, edge.dst.index)])
        for i in range(node.n_inputs):
            edge = graph.edge_into(name, i)
            assert edge is not None
            bwd.append(inbox_of[(edge.src.node, 1, edge.src.index)])
        fwd_route.append(fwd or [-1])
        bwd_route.append(bwd or [-1])

    if numerics.fixed and losses and numerics.data.frac > loss_tables(numerics.data).loss_frac:
        raise NativeUnsupported(f"node '{losses[0]}': a fixed-point loss needs data.frac <= "
                                f"{loss_tables(numerics.data).loss_frac}")
    tables_of_loss = loss_tables(numerics.data)
    env = environment()
    common = {
        "payload_type": "int64_t" if numerics.fixed else ("double" if numerics.float_dtype == "float64" else "float"),
        "master_type": "double" if numerics.float_dtype == "float64" else "float",
        "fixed": numerics.fixed,
        "max_state_words": MAX_STATE_WORDS,
        "state_space": STATE_SPACE,
        "pool_class_bytes": POOL_CLASS_BYTES,
        "max_state_value": MAX_STATE_VALUE,
        "acc_min": ACC_MIN,
        "acc_max": ACC_MAX,
        "data": _precision(numerics.data),
        "weights": _precision(numerics.weights),
        "grads": _precision(numerics.grads),
        "grad_acc_frac": numerics.grad_acc_frac,
        "optimizers": OPTIMIZERS,
        "graph_name": graph.name,
        "tables": tables,
        "conds": conds,
        "isus": isus,
        "nodes": [{"name": n, "type": t, "args": a} for n, (t, a) in zip(names, decls)],
        "param_nodes": params,
        "param_index": [params.index(n) if n in params else -1 for n in names],
        "source_nodes": sources,
        "source_index": [index[n] for n in sources],
        "loss_nodes": losses,
        "fwd_route": fwd_route,
        "bwd_route": bwd_route,
        "inbox_node": inbox_node,
        "inbox_dir": inbox_dir,
        "inbox_port": inbox_port,
        "n_sites": len(sites),
        "loss": {f: getattr(tables_of_loss, f) for f in ("lo_bits", "umax", "exp_frac", "recip_shift", "loss_frac",
                                                        "log_index_bits", "ln2", "exp_hi", "exp_lo", "log")},
    }
    files = {}
    for t in TEMPLATES:
        files[t] = env.get_template(f"native/{t}.j2").render(**common)
    return NativeGraph(files, names, params, sources, losses, sites)
