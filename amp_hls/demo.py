"""``amp-hls demo``: the main job, end to end.

1. build the example models, print their graphs, and push a few instances forward and backward
   through the numpy kernels in float and in bit-exact fixed point, checking conservation;
2. train ``list-rnn`` asynchronously on the CPU runtime to its target and print the run summary.
"""

from __future__ import annotations

import numpy as np

from .kernels import LinearKernel
from .models import MODELS
from .numerics import NumericConfig
from .runtime import Engine


def run_demo(n_instances: int = 8, seed: int = 0) -> int:
    status = check_models(n_instances, seed)
    print("training list-rnn (asynchronous, CPU runtime) to its target ...")
    from .cli import main

    return status or main(["train", "list-rnn", "--seed", str(seed)])


def check_models(n_instances: int, seed: int) -> int:
    """Print each example graph, push instances forward and backward, report what happened."""
    status = 0
    for name, entry in MODELS.items():
        graph = entry.build()
        examples = entry.data(seed).train[:n_instances]
        print(graph.summary())
        print()
        for mode in ("float", "fixed"):
            engine = Engine(graph, NumericConfig(mode), seed=seed)
            for key, example in enumerate(examples):
                engine.inject(key, entry.inputs(graph, example))
            finished = engine.run()
            losses = [r.loss for k in engine.kernels.values() for r in getattr(k, "results", [])]
            grad_norm = sum(
                float(np.linalg.norm(g)) for k in engine.kernels.values() if isinstance(k, LinearKernel)
                for g in k.grads_as_float().values()
            )
            problems = engine.conservation_report()
            print(
                f"  {name:9s} {mode:5s}: {len(finished)} instances forward+backward in "
                f"{engine.stats.steps} kernel calls ({engine.stats.messages} messages), "
                f"mean loss {np.mean(losses):.4f}, |grad| {grad_norm:.4f}, "
                f"saturations {engine.counter.total}, conservation {'ok' if not problems else problems}"
            )
            status |= bool(problems) or len(finished) != n_instances
        print()
    return int(status)
