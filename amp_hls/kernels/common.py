"""Helpers the kernels share: port and shape checks, index payloads, exact sums, zero gradients."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..message import Message, Tag
from ..numerics import Precision, saturate
from .base import Joined, Kernel


def check_inputs(kernel: Kernel, port: int, msgs: Sequence[Message]) -> None:
    """Reject a forward batch on a port the node lacks or whose payloads break the edge spec."""
    if not kernel.checks:
        return
    if not 0 <= port < len(kernel.in_specs):
        raise kernel.error(f"no input port in{port} (the node has {len(kernel.in_specs)})")
    for m in msgs:
        kernel.check_payload(m, kernel.in_specs[port], port)


def check_grads(kernel: Kernel, port: int, msgs: Sequence[Message]) -> None:
    """Reject a backward batch on an output port the node lacks or that breaks its edge spec."""
    if not kernel.checks:
        return
    if not 0 <= port < len(kernel.out_specs):
        raise kernel.error(f"no output port out{port} (the node has {len(kernel.out_specs)})")
    spec = kernel.out_specs[port]
    for m in msgs:
        p = m.payload
        if p.ndim != 2 or p.shape[1] != spec.width or not 1 <= p.shape[0] <= spec.max_rows:
            raise kernel.error(
                f"out{port}: gradient of shape {p.shape} does not fit {spec} (tag {m.tag})"
            )


def index_rows(kernel: Kernel, payload: np.ndarray, tags: Sequence[Tag], port: int) -> np.ndarray:
    """The index rows of the messages ``tags`` (stacked) as int64; anything else is a wiring or
    host bug, not a value to scale."""
    p = np.asarray(payload)
    if p.dtype.kind not in "iu":
        which = f"tag {tags[0]}" if len(tags) == 1 else f"one of {len(tags)} tags, {tags[0]} to {tags[-1]}"
        raise kernel.error(f"in{port}: index payload of dtype {p.dtype} ({which})")
    return p.astype(np.int64, copy=False)


def stack_ports(kernel: Kernel, joined: Joined) -> tuple[list[np.ndarray], Sequence[int]]:
    """The stacked payloads of complete joins per port and their common row offsets, so an
    elementwise kernel handles every set in one call; a ``KernelError`` if a set's rows differ."""
    offsets = joined.offsets[0]
    for port_offsets in joined.offsets[1:]:
        if port_offsets != offsets:
            for k, tag in enumerate(joined.tags):  # names the first set whose rows differ
                counts = [o[k + 1] - o[k] for o in joined.offsets]
                if len(set(counts)) > 1:
                    raise kernel.error(f"joined messages of tag {tag} differ in rows: {counts}")
    return joined.parts, offsets


def exact_sum(
    kernel: Kernel, arrays: Sequence[np.ndarray], prec: Precision, site: str
) -> np.ndarray:
    """Elementwise sum: float in the payload dtype; fixed exact in int64, saturated once."""
    total = arrays[0]
    for a in arrays[1:]:
        total = total + a
    if kernel.fixed:
        return saturate(total, prec, kernel.counter, kernel.site(site))
    return np.asarray(total, dtype=kernel.dtype)


def zero_grad(kernel: Kernel, msg: Message) -> np.ndarray:
    """The gradient of a payload nothing differentiates (targets, labels, index rows)."""
    return kernel.zeros(msg.rows, msg.width)


def check_grad(kernel: Kernel, msg: Message, shape: tuple[int, ...]) -> None:
    """A gradient must have the shape of the forward payload of its tag."""
    if msg.payload.shape != shape:
        raise kernel.error(
            f"gradient of shape {msg.payload.shape} for a forward payload of shape {shape} "
            f"(tag {msg.tag})"
        )
