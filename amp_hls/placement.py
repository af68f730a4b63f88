"""Placement: which nodes run on the device, and the channels where messages cross over.

A channel is one boundary crossing, named and numbered once here for every executor (the numpy
device model, the generated C++, the RTL, the board driver and the host):

- an *edge* channel for each IR edge between a host node and a device node; its DATA messages
  travel forward one way and backward the other;
- a *params* channel for each device node with parameters (``Node.param_shapes``): WEIGHTS go
  in, GRADS come out. The payload is the node's tensors side by side, one row per leading index,
  in ``param_shapes`` order: for a Linear ``[W[o, :], b[o]]`` per output feature (bias column only
  if present);
- a *loss* channel for each device Loss node (``<node>_loss``): one LOSS message out per
  message the node judges (``wire.LOSS_FIELDS``), so a device loss needs no host round trip.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import IRError
from .ir import Edge, GraphCore, Loss, Node
from .wire import LOSS_WIDTH, ChannelMap, ChannelSpec, Kind, Shape


@dataclass(frozen=True)
class BoundaryChannel:
    channel: int
    name: str
    edge: Edge | None  # set for edge channels
    node: str | None  # set for params channels
    spec: ChannelSpec
    loss_of: str | None = None  # set for loss channels: the device Loss node that reports on it

    @property
    def is_params(self) -> bool:
        return self.node is not None


@dataclass(frozen=True)
class Placement:
    graph: GraphCore
    device_nodes: tuple[str, ...]
    host_nodes: tuple[str, ...]
    channels: tuple[BoundaryChannel, ...]

    @property
    def channel_map(self) -> ChannelMap:
        return ChannelMap(c.spec for c in self.channels)

    def channel(self, channel_id: int) -> BoundaryChannel:
        for c in self.channels:
            if c.channel == channel_id:
                return c
        raise IRError(f"no boundary channel {channel_id}")

    def edge_channel(self, edge: Edge) -> BoundaryChannel:
        for c in self.channels:
            if c.edge == edge:
                return c
        raise IRError(f"edge {edge} does not cross the host/device boundary")

    def params_channel(self, node: str) -> BoundaryChannel:
        for c in self.channels:
            if c.node == node:
                return c
        raise IRError("not a device parameter node", node=node)

    def loss_channel(self, node: str) -> BoundaryChannel:
        for c in self.channels:
            if c.loss_of == node:
                return c
        raise IRError("not a device loss node", node=node)

    def enters_device(self, edge: Edge) -> bool:
        """Whether forward messages on ``edge`` flow host -> device."""
        return edge.dst.node in self.device_nodes

    def to_json(self) -> dict[str, Any]:
        out = []
        for c in self.channels:
            entry: dict[str, Any] = {
                "channel": c.channel,
                "name": c.name,
                "shapes": {k.name: {"width": s.width, "max_rows": s.max_rows} for k, s in c.spec.shapes.items()},
            }
            if c.edge is not None:
                entry["edge"] = str(c.edge)
                entry["forward_into_device"] = self.enters_device(c.edge)
            elif c.loss_of is not None:
                entry["loss_of"] = c.loss_of
                entry["layout"] = "one row per judged message: [loss, metric, rows]"
            else:
                entry["params_of"] = c.node
                entry["layout"] = "one row per output feature: [weight[o, :], bias[o]]"
            out.append(entry)
        return {"device_nodes": list(self.device_nodes), "host_nodes": list(self.host_nodes), "channels": out}


def place(graph: GraphCore) -> Placement:
    """Split ``graph`` by its nodes' placement attributes and number the boundary channels."""
    graph.validate()
    device = tuple(n for n, node in graph.nodes.items() if node.placement == "device")
    host = tuple(n for n in graph.nodes if n not in device)
    channels: list[BoundaryChannel] = []
    for edge in graph.edges:
        if (edge.src.node in device) != (edge.dst.node in device):
            spec = graph.spec(edge.src.node, edge.src.index)
            name = f"{edge.src.node}_out{edge.src.index}__{edge.dst.node}_in{edge.dst.index}"
            cs = ChannelSpec(len(channels), name, {Kind.DATA: Shape(spec.width, spec.max_rows)})
            channels.append(BoundaryChannel(len(channels), name, edge, None, cs))
    for name in device:
        node = graph.nodes[name]
        if node.param_shapes():
            shape = params_shape(node)
            cs = ChannelSpec(len(channels), f"{name}_params", {Kind.WEIGHTS: shape, Kind.GRADS: shape})
            channels.append(BoundaryChannel(len(channels), cs.name, None, name, cs))
    for name in device:
        if isinstance(graph.nodes[name], Loss):
            cs = ChannelSpec(len(channels), f"{name}_loss", {Kind.LOSS: Shape(LOSS_WIDTH, 1)})
            channels.append(BoundaryChannel(len(channels), cs.name, None, None, cs, loss_of=name))
    return Placement(graph, device, host, tuple(channels))


def _param_columns(node: Node) -> dict[str, int]:
    """Columns each parameter tensor takes in a params-channel row (its trailing dimensions)."""
    shapes = node.param_shapes()
    rows = {shape[0] for shape in shapes.values()}
    if len(rows) != 1:  # a node kind's definition, never user input
        raise IRError(f"parameter tensors {shapes} do not share a leading dimension", node=node.name)
    return {name: int(np.prod(shape[1:], dtype=np.int64)) for name, shape in shapes.items()}


def params_shape(node: Node) -> Shape:
    """The params channel's payload shape: every tensor's columns, one row per leading index."""
    rows = next(iter(node.param_shapes().values()))[0]
    return Shape(sum(_param_columns(node).values()), rows)


def pack_params(node: Node, params: dict[str, np.ndarray]) -> np.ndarray:
    """Parameter tensors as params-channel rows (for a Linear: ``[W[o, :], b[o]]`` per output)."""
    rows = params_shape(node).max_rows
    return np.concatenate([np.asarray(params[name]).reshape(rows, cols) for name, cols in _param_columns(node).items()], axis=1)


def unpack_params(node: Node, rows: np.ndarray) -> dict[str, np.ndarray]:
    """The tensors of ``pack_params`` back, in their ``param_shapes`` shapes."""
    out, start = {}, 0
    for (name, shape), cols in zip(node.param_shapes().items(), _param_columns(node).values(), strict=True):
        out[name] = rows[:, start:start + cols].reshape(shape)
        start += cols
    return out
