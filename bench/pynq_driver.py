"""PYNQ driver throughput (host/pynq.py) against the simulated DMA when the far side answers at once.

    python -m bench.pynq_driver                # mlp, 2000 instances, mak 16, 3 repeats
    python -m bench.pynq_driver --instances 5000 --mak 16 --repeats 5

The traffic is mlp's on a board: per instance a forward message in (18 beats) and out (5), a
gradient in (5) and out (18), and per ``muf`` backward messages a GRADS dump of each Linear node
out and fresh WEIGHTS in (n_sync 1): the messages ``HostRunner`` exchanges, in its rhythm (send
``mak`` messages, poll, repeat). The far side is no simulator but an echo that answers every
batch with its precomputed reply in one host_out packet, as the rtl flow's ``amp_pack`` sends
them, so the time measured is the driver's -- encoding, PYNQ's channel calls on the simulated
registers, two DMA buffers each way, decoding -- and the far side's bookkeeping (measured too).

The peers, measured in the same run on the same messages: the wire codec alone, no DMA -- the
reference one (``encode_bytes`` of what is sent, ``StreamDecoder.feed`` of what is received, what
the driver used per message before) and the batched one the driver uses now (``encode_many``,
``decode_many``: its floor). Results: ``bench/results/pynq_driver.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

from amp_hls.codegen.project import generate_project
from amp_hls.design import DeviceOptions
from amp_hls.host.pynq import PynqDevice
from amp_hls.host.pynq_sim import SimPynq
from amp_hls.message import Direction, Tag
from amp_hls.models import MODELS
from amp_hls.placement import pack_params
from amp_hls.wire import (
    Kind,
    StreamDecoder,
    WireMessage,
    decode_many,
    encode_beats,
    encode_bytes,
    encode_many,
)

RESULTS = Path(__file__).resolve().parent / "results" / "pynq_driver.json"


class EchoFar:
    """The device side of the simulated DMA: takes host_in at once and answers each batch with
    ``replies`` (beats, TLAST at the end of the batch's packet), within the armed S2MM length."""

    sticky = True

    def __init__(self) -> None:
        self.queue: list[np.ndarray] = []  # reply packets to give, in order
        self.replies: list[np.ndarray] = []  # the packet of the next batches, set by the bench
        self.out = np.zeros(0, dtype=np.uint64)
        self.allowed = 0
        self.pending_in = 0
        self.busy_s = 0.0

    def set_sticky(self, on: bool) -> None:
        pass

    def stop_when_blocked(self, on: bool) -> None:
        pass

    def arm_out(self, beats: int) -> None:
        self.allowed = beats

    def run(self, cycles: int) -> bool:
        return True

    def push_beats(self, data: np.ndarray, last: np.ndarray) -> None:
        start = time.perf_counter()
        if self.replies:
            self.queue.append(self.replies.pop(0))
        self.busy_s += time.perf_counter() - start

    def pop_beats(self) -> tuple[np.ndarray, np.ndarray]:
        start = time.perf_counter()
        if not len(self.out) and self.queue:
            self.out = self.queue.pop(0)
        n = min(len(self.out), self.allowed) if self.allowed > 0 else 0
        data, self.out = self.out[:n], self.out[n:]
        last = np.zeros(n, dtype=bool)
        if n and not len(self.out):
            last[-1] = True
        self.busy_s += time.perf_counter() - start
        return data, last

    def reset(self) -> None:
        self.queue.clear()


def traffic(placement, instances: int, mak: int, muf: int):  # type: ignore[no-untyped-def]
    """mlp's messages: per batch of ``mak`` instances, (sent, received) twice (forward, backward)."""
    rng = np.random.default_rng(0)
    graph = placement.graph
    into = next(c for c in placement.channels if c.edge is not None and placement.enters_device(c.edge))
    out = next(c for c in placement.channels if c.edge is not None and not placement.enters_device(c.edge))
    w_in, w_out = into.spec.shapes[Kind.DATA].width, out.spec.shapes[Kind.DATA].width
    params = [c for c in placement.channels if c.node is not None]
    weights = {c.node: pack_params(graph.nodes[c.node], {k: rng.integers(-100, 100, v).astype(np.int64)
                                                         for k, v in graph.nodes[c.node].param_shapes().items()})
               for c in params}
    batches = []
    dumps = 0
    for lo in range(0, instances, mak):
        keys = range(lo, min(lo + mak, instances))
        fwd_in = [WireMessage(into.channel, Kind.DATA, Direction.FWD, Tag(k, ()), rng.integers(-999, 999, (1, w_in)))
                  for k in keys]
        fwd_out = [WireMessage(out.channel, Kind.DATA, Direction.FWD, Tag(k, ()), rng.integers(-999, 999, (1, w_out)))
                   for k in keys]
        bwd_in = [WireMessage(out.channel, Kind.DATA, Direction.BWD, Tag(k, ()), rng.integers(-999, 999, (1, w_out)))
                  for k in keys]
        bwd_out = [WireMessage(into.channel, Kind.DATA, Direction.BWD, Tag(k, ()), rng.integers(-999, 999, (1, w_in)))
                   for k in keys]
        grads, new_weights = [], []
        for _ in range((lo + len(keys)) // muf - lo // muf):
            for c in params:
                grads.append(WireMessage(c.channel, Kind.GRADS, Direction.BWD, Tag(dumps, (0,)),
                                         rng.integers(-2**40, 2**40, weights[c.node].shape)))
                new_weights.append(WireMessage(c.channel, Kind.WEIGHTS, Direction.FWD, Tag(dumps + 1, ()), weights[c.node]))
            dumps += 1
        batches.append((fwd_in, fwd_out))
        batches.append((bwd_in + new_weights, bwd_out + grads))
    return batches


def packets(batches, channels) -> list[np.ndarray]:  # type: ignore[no-untyped-def]
    return [np.concatenate([encode_beats(m, channels)[0] for m in got]) for _, got in batches]


def run_driver(project, batches, channels) -> tuple[float, int, float]:  # type: ignore[no-untyped-def]
    far = EchoFar()
    far.replies = packets(batches, channels)
    driver = PynqDevice(project.root, pynq=SimPynq(far, dma_name="dma"), timeout=10.0)
    start = time.perf_counter()
    n = 0
    for sent, got in batches:
        driver.send(sent)
        received = []
        while len(received) < len(got):
            received += driver.poll(10.0, expect=True)
        n += len(received)
    elapsed = time.perf_counter() - start
    assert n == sum(len(g) for _, g in batches)
    driver.close()
    return elapsed, n, far.busy_s


def run_codec(batches, channels, batched: bool) -> float:  # type: ignore[no-untyped-def]
    """The wire codec alone on the same messages: the reference (``encode_bytes``, a
    ``StreamDecoder``) or the batched one the driver uses (``encode_many``, ``decode_many``)."""
    replies = [encode_bytes(got, channels) for _, got in batches]  # what a DMA would have written
    decoder = StreamDecoder(channels)
    start = time.perf_counter()
    for (sent, got), raw in zip(batches, replies):
        if batched:
            encode_many(sent, channels)
            assert len(decode_many(raw, channels)) == len(got)
        else:
            encode_bytes(sent, channels)
            assert len(decoder.feed(raw)) == len(got)
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--instances", type=int, default=2000)
    ap.add_argument("--mak", type=int, default=16)
    ap.add_argument("--muf", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--project", type=Path, default=Path("build") / "bench_pynq_driver")
    args = ap.parse_args()
    spec = MODELS["mlp"]
    project = generate_project(spec.build(), args.project, "pynq-z2",
                               DeviceOptions(muf=args.muf, cache_slots=args.mak, max_in_flight=args.mak), force=True)
    placement = project.hls.placement
    from amp_hls.control import with_control

    channels = with_control(placement.channel_map)
    batches = traffic(placement, args.instances, args.mak, args.muf)
    driver_s, codec_s, batched_s, far_s = [], [], [], []
    messages = 0
    for _ in range(args.repeats):  # interleaved, so a busy machine slows all three alike
        elapsed, messages, far = run_driver(project, batches, channels)
        driver_s.append(elapsed)
        far_s.append(far)
        codec_s.append(run_codec(batches, channels, batched=False))
        batched_s.append(run_codec(batches, channels, batched=True))
    d, c, f = statistics.median(driver_s), statistics.median(codec_s), statistics.median(far_s)
    b = statistics.median(batched_s)
    result = {
        "model": "mlp", "instances": args.instances, "mak": args.mak, "muf": args.muf, "repeats": args.repeats,
        "messages": messages + sum(len(s) for s, _ in batches),
        "driver_s": d, "driver_instances_per_s": args.instances / d,
        "driver_without_far_side_instances_per_s": args.instances / (d - f), "far_side_s": f,
        "codec_s": c, "codec_instances_per_s": args.instances / c,
        "batched_codec_s": b, "batched_codec_instances_per_s": args.instances / b,
        "ratio_driver_to_codec": c / d, "ratio_driver_to_batched_codec": b / d,
    }
    print(f"pynq driver, mlp traffic against the simulated DMA (far side answers at once), mak {args.mak}, "
          f"muf {args.muf}, {args.instances} instances x {args.repeats}:")
    print(f"  driver  {result['driver_instances_per_s']:>9,.0f} instances/s  ({d:.3f} s, far side {f:.3f} s of it)")
    print(f"  codec   {result['codec_instances_per_s']:>9,.0f} instances/s  ({c:.3f} s): encode_bytes + StreamDecoder "
          "alone, no DMA")
    print(f"  batched {result['batched_codec_instances_per_s']:>9,.0f} instances/s  ({b:.3f} s): encode_many + "
          "decode_many alone, no DMA (the driver's floor)")
    print(f"  ratio   driver / codec = {result['ratio_driver_to_codec']:.2f}, driver / batched codec = "
          f"{result['ratio_driver_to_batched_codec']:.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
