"""The parameter server (docs/glossary.md; GPU A-SGD's server, one device as its client).

It keeps fp32 master weights and the optimizer state on the host. Each GRADS dump from a device
parameter node (a 48-bit gradient sum over the backward messages its tag counts, ``muf`` of them
today: wire.GRADS_STATE) is applied, as their mean, the moment it arrives; every ``n_sync`` dumps the server pushes freshly quantised WEIGHTS back, without
stopping the device. Staleness is recorded per dump: how many server updates of that node
happened since the weights version the device was running when it made the dump.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..ir import GraphCore
from ..kernels.base import StalenessStats
from ..message import Direction, Tag
from ..numerics import NumericConfig, quantize
from ..placement import Placement, pack_params, unpack_params
from ..runtime.optim import Optimizer, OptimizerConfig
from ..wire import GRADS_STATE, Kind, WireMessage
from .device import DeviceError


@dataclass
class NodeState:
    params: dict[str, np.ndarray]  # fp32 masters
    version: int = 0  # server updates applied to this node
    sent_version: int = 0  # version last pushed to the device
    dumps_since_sync: int = 0
    staleness: StalenessStats = field(default_factory=StalenessStats)


class ParameterServer:
    def __init__(
        self,
        placement: Placement,
        numerics: NumericConfig,
        optimizer: OptimizerConfig,
        initial: dict[str, dict[str, np.ndarray]],
        muf: int,
        n_sync: int = 1,
    ):
        if n_sync < 1:
            raise DeviceError(f"n_sync must be at least 1, got {n_sync}")
        self.placement = placement
        self.numerics = numerics
        self.optimizer = Optimizer(optimizer)
        self.muf = muf  # the device's dump period; each dump's own count scales it (wire.GRADS_STATE)
        self.n_sync = n_sync
        self.nodes = {
            name: NodeState({k: np.asarray(v, dtype=np.float32).copy() for k, v in initial[name].items()})
            for name in self._param_nodes(placement.graph, placement)
        }
        self.saturations = 0
        self.dumps = 0

    @staticmethod
    def _param_nodes(graph: GraphCore, placement: Placement) -> list[str]:
        return [n for n in placement.device_nodes if graph.nodes[n].param_shapes()]

    def weights_messages(self, names: list[str] | None = None) -> list[WireMessage]:
        """Quantised WEIGHTS for ``names`` (default: every parameter node), tagged with versions."""
        msgs = []
        for name in names if names is not None else list(self.nodes):
            state = self.nodes[name]
            node = self.placement.graph.nodes[name]
            q = {k: quantize(v, self.numerics.weights) for k, v in state.params.items()}
            ch = self.placement.params_channel(name)
            msgs.append(WireMessage(ch.channel, Kind.WEIGHTS, Direction.FWD,
                                    Tag(state.version, ()), pack_params(node, q)))
            state.sent_version = state.version
            state.dumps_since_sync = 0
        return msgs

    def apply(self, dump: WireMessage, send: Callable[[list[WireMessage]], None]) -> None:
        """Apply one GRADS dump; push new weights for that node every ``n_sync`` dumps."""
        ch = self.placement.channel(dump.channel)
        if dump.kind is not Kind.GRADS or ch.node is None:
            raise DeviceError(f"{ch.spec}: expected a GRADS dump, got {dump.kind.name}")
        state = self.nodes[ch.node]
        node = self.placement.graph.nodes[ch.node]
        if len(dump.tag.state) != len(GRADS_STATE) or not dump.tag.state[GRADS_STATE.index("count")]:
            raise DeviceError(f"{ch.spec}: a GRADS dump's state is {GRADS_STATE} with a count of at least 1, "
                              f"got {dump.tag.state}")
        fields = dict(zip(GRADS_STATE, dump.tag.state))
        state.staleness.record((state.version - fields["version"]) % (1 << 16))
        # the sum of the messages the device says it summed -> their mean
        scale = float(1 << self.numerics.grad_acc_frac) * fields["count"]
        grads = {k: v.astype(np.float64) / scale for k, v in unpack_params(node, dump.payload).items()}
        state.params = self.optimizer.step(ch.node, state.params, grads)
        state.version += 1
        state.dumps_since_sync += 1
        self.dumps += 1
        if state.dumps_since_sync >= self.n_sync:
            send(self.weights_messages([ch.node]))

    def params(self) -> dict[str, dict[str, np.ndarray]]:
        return {name: dict(s.params) for name, s in self.nodes.items()}
