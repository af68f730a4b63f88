"""What a generated device fixes, and a run's settings held against it.

A bitstream (or a C or RTL simulation) is generated for fixed numerics, a GRADS dump period
(muf), tag tables of ``cache_slots`` entries and, so that its FIFOs never fill
(docs/architecture.md, FIFO sizing), at most ``max_in_flight`` instances in flight
(``DeviceOptions``, recorded in ``manifest.json``). A run that disagrees would not fail loudly:
the parameter server would scale every gradient sum by the wrong muf, the host would quantise at
another precision, and a loop model with too many instances in flight can fill a tag table and
deadlock. ``check_run`` refuses such a run, naming each setting and both ways to fix it.

``messages_per_instance`` is the sizing rule's other factor: the most forward messages one
instance leaves at one device node (a loop leaves one per trip), counted on the numpy runtime
(``runtime.traffic``, which the cycle report sizes by too).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from ..design import DeviceOptions
from ..errors import AmpHlsError
from ..ir import LIMITS, GraphCore
from ..models.inputs import Inputs
from ..numerics import NumericConfig
from ..placement import Placement
from ..runtime import traffic
from ..runtime.traffic import SAMPLE, is_dynamic, structural_messages

__all__ = ["SAMPLE", "structural_messages"]  # re-exported: the trainers and tests size by them


class SettingsError(AmpHlsError):
    """A run whose settings disagree with what its device was generated for."""


@dataclass(frozen=True)
class DeviceSettings:
    """What a device fixes; None where it fixes nothing (the numpy device model's tag tables)."""

    numerics: NumericConfig
    muf: int
    cache_slots: int | None = None
    max_in_flight: int | None = None
    source: str = "the device"  # how the messages name it

    @classmethod
    def of(cls, options: DeviceOptions, source: str) -> DeviceSettings:
        return cls(options.numerics, options.muf, options.cache_slots, options.max_in_flight, source)


def messages_per_instance(placement: Placement, inputs: Sequence[Inputs]) -> int:
    """The sizing rule's count (runtime.traffic) at ``placement``'s device nodes."""
    return traffic.messages_per_instance(placement.graph, placement.device_nodes, inputs)


def sized_options(per_instance: int, numerics: NumericConfig, muf: int, mak: int | None = None,
                  cache_slots: int | None = None, default_mak: int = 16) -> DeviceOptions:
    """Device options by the sizing rule ``cache_slots >= mak x per_instance``: the tag tables
    for ``mak`` instances in flight, or the most instances ``cache_slots`` supports; both given
    must agree."""
    if cache_slots is None:
        mak = mak if mak is not None else default_mak
        cache_slots = mak * per_instance
        if cache_slots > LIMITS.max_cache_slots:
            most = LIMITS.max_cache_slots // per_instance
            raise SettingsError(f"--mak {mak} x {per_instance} messages per instance needs {cache_slots} cache slots, "
                                f"more than a kernel's tag table may have ({LIMITS.max_cache_slots}): "
                                f"give at most --mak {most}")
    elif mak is None:
        mak = cache_slots // per_instance
        if mak < 1:
            raise SettingsError(f"--cache-slots {cache_slots} holds no instance: one leaves up to {per_instance} "
                                f"messages at a node; give at least --cache-slots {per_instance}")
    elif mak * per_instance > cache_slots:
        raise SettingsError(f"--mak {mak} x {per_instance} messages per instance needs {mak * per_instance} cache "
                            f"slots, more than --cache-slots {cache_slots}: raise --cache-slots or lower --mak")
    return DeviceOptions(numerics=numerics, muf=muf, cache_slots=cache_slots, max_in_flight=mak)


def _precisions(numerics: NumericConfig) -> str:
    return ", ".join(f"{name} {getattr(numerics, name)}" for name in ("data", "weights", "grads"))


def check_run(device: DeviceSettings, numerics: NumericConfig, muf: int, mak: int,
              per_instance: int | None = None) -> None:
    """SettingsError unless a run with these settings can train on ``device``."""
    what = device.source
    problems = []
    if device.numerics != numerics:
        problems.append(f"setting numerics: {what} computes {_precisions(device.numerics)}, this run "
                        f"{_precisions(numerics)}: train with the device's precisions, or regenerate the "
                        "project with this run's")
    if device.muf != muf:
        problems.append(f"setting muf: {what} dumps gradients every {device.muf} backward messages, this run "
                        f"asks for --muf {muf}: train with --muf {device.muf}, or regenerate the project with --muf {muf}")
    if device.max_in_flight is not None and mak > device.max_in_flight:
        problems.append(f"setting mak: {what} is sized for at most {device.max_in_flight} instances in flight, "
                        f"this run asks for --mak {mak}: train with --mak {device.max_in_flight}, or regenerate the "
                        f"project with --mak {mak}")
    elif device.cache_slots is not None and per_instance is not None and mak * per_instance > device.cache_slots:
        most = max(1, device.cache_slots // per_instance)
        problems.append(f"setting mak: {what} has tag tables of {device.cache_slots} entries, and --mak {mak} "
                        f"instances of up to {per_instance} messages at a node need {mak * per_instance}: train "
                        f"with --mak {most}, or regenerate the project with --cache-slots {mak * per_instance}")
    if problems:
        raise SettingsError("; ".join(problems))


def generation_options(spec, graph: GraphCore, options: DeviceOptions, *, muf_given: bool,  # type: ignore[no-untyped-def]
                       cache_given: bool, mak: int | None = None, sample: int = 512) -> DeviceOptions:
    """What ``amp-hls generate`` fixes: ``options`` (the precisions, muf and cache slots given),
    with muf and mak from the model's training defaults (``spec.defaults``) unless given, and the
    tag tables sized by the rule for the messages one instance of the model's data leaves at a
    node (``spec`` None, a graph without data: the graph's own bound, ``structural_messages``)."""
    from ..placement import place

    defaults = dict(getattr(spec, "defaults", {}) or {})
    muf = options.muf if muf_given or "muf" not in defaults else int(defaults["muf"])
    per = structural_messages(graph)
    if spec is not None and is_dynamic(graph):  # a static graph leaves one message per port: no data needed
        try:
            splits = spec.splits(0)
        except AmpHlsError:  # its data cannot be loaded here (an extra): the graph's bound
            splits = None
        if splits is not None:
            per = messages_per_instance(place(graph), [spec.inputs(e) for e in splits.train[:sample]])
    if cache_given:
        sized = sized_options(per, options.numerics, muf, mak=mak, cache_slots=options.cache_slots)
    elif mak is None and "mak" not in defaults:  # nothing says how many: as many as the default tables hold
        sized = sized_options(per, options.numerics, muf, mak=None, cache_slots=options.cache_slots)
    else:
        sized = sized_options(per, options.numerics, muf, mak=mak if mak is not None else int(defaults["mak"]))
    return dataclasses.replace(sized, dump_engine=options.dump_engine, lutram_depth=options.lutram_depth)  # as given
