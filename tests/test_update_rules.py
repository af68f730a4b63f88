"""Updates happen at exactly ``muf`` gradients (docs/glossary.md): with one instance in flight each
backward message reaches a node alone, so every update must carry exactly ``muf`` of them; an
update one gradient late (or early) fails here, which batched runs cannot tell apart."""

from __future__ import annotations

import pytest

from amp_hls.datasets import Splits
from amp_hls.models import MODELS
from amp_hls.runtime.trainer import TrainConfig, Trainer


@pytest.mark.parametrize("model", ["mlp", "list-rnn"])
@pytest.mark.parametrize("muf", [1, 3, 7])
def test_every_update_carries_exactly_muf_gradients(model, muf, monkeypatch):
    full = MODELS[model].splits(0)
    trainer = Trainer(MODELS[model], TrainConfig(mak=1, muf=muf, epochs=1),
                      Splits(full.name, full.train[:30], full.val[:5], full.test[:5]))
    sizes: dict[str, list[int]] = {k.name: [] for k in trainer.param_kernels}
    apply = trainer._apply

    def recording_apply(kernel):
        sizes[kernel.name].append(kernel.n_grads)
        apply(kernel)

    monkeypatch.setattr(trainer, "_apply", recording_apply)
    trainer.train_epoch()
    for kernel in trainer.param_kernels:
        grads_in = trainer.engine.counts[kernel.name].bwd_in
        assert grads_in >= muf, (kernel.name, grads_in)
        assert sizes[kernel.name] == [muf] * (grads_in // muf), (kernel.name, sizes[kernel.name])
        assert kernel.n_grads == grads_in % muf  # the rest waits for the next update
