"""What a generated device fixes (numerics, muf, cache slots, instances in flight) and a run held
against it: every device backend refuses a run whose settings disagree, naming the setting and
both fixes; `amp-hls generate` sizes a device for the model's own training run. And a device fault
during training: DeviceError, soft reset, training goes on with conservation intact.
"""

from __future__ import annotations

import numpy as np
import pytest

from amp_hls.codegen.project import write_project
from amp_hls.design import DeviceOptions, build_design
from amp_hls.host import CpuDevice
from amp_hls.host.csim import CsimDevice
from amp_hls.host.settings import (
    DeviceSettings,
    SettingsError,
    check_run,
    generation_options,
    messages_per_instance,
    sized_options,
    structural_messages,
)
from amp_hls.host.trainer import DeviceTrainer
from amp_hls.message import Direction, Tag
from amp_hls.models import MODELS
from amp_hls.numerics import NumericConfig, Precision
from amp_hls.placement import place
from amp_hls.runtime.optim import OptimizerConfig
from amp_hls.runtime.trainer import TrainConfig
from amp_hls.wire import Kind, WireMessage
from tests.helpers import FIXED


def test_each_setting_that_disagrees_is_named_with_both_fixes():
    device = DeviceSettings(FIXED, muf=4, cache_slots=40, max_in_flight=2, source="the bitstream x.bit")
    check_run(device, FIXED, 4, 2, per_instance=20)
    with pytest.raises(SettingsError) as caught:
        check_run(device, NumericConfig("fixed", data=Precision(8, 4)), 8, 3, per_instance=20)
    text = str(caught.value)
    assert "setting numerics: the bitstream x.bit computes data Q16.10" in text and "data Q8.4" in text
    assert "setting muf: the bitstream x.bit dumps gradients every 4 backward messages" in text
    assert "train with --muf 4, or regenerate the project with --muf 8" in text
    assert "setting mak: the bitstream x.bit is sized for at most 2 instances in flight" in text
    loose = DeviceSettings(FIXED, muf=4, cache_slots=40, source="the C simulation")
    with pytest.raises(SettingsError, match=r"tag tables of 40 entries.*need 60.*--mak 2.*--cache-slots 60"):
        check_run(loose, FIXED, 4, 3, per_instance=20)
    check_run(DeviceSettings(FIXED, muf=4), FIXED, 4, 1000, per_instance=20)  # the numpy model: no tables


def test_generate_sizes_the_device_for_the_models_training_run():
    mlp, lists = MODELS["mlp"], MODELS["list-rnn"]
    assert structural_messages(lists.build()) == 20 and structural_messages(mlp.build()) == 1
    assert messages_per_instance(place(lists.build()), [lists.inputs(e) for e in lists.splits(0).train[:50]]) == 20
    defaults = DeviceOptions()
    got = generation_options(lists, lists.build(), defaults, muf_given=False, cache_given=False)
    assert (got.muf, got.max_in_flight, got.cache_slots) == (16, 16, 320)
    got = generation_options(mlp, mlp.build(), defaults, muf_given=False, cache_given=False, mak=4)
    assert (got.muf, got.max_in_flight, got.cache_slots) == (8, 4, 4)
    got = generation_options(lists, lists.build(), DeviceOptions(muf=2, cache_slots=45), muf_given=True, cache_given=True)
    assert (got.muf, got.max_in_flight, got.cache_slots) == (2, 2, 45)  # what the tables hold
    got = generation_options(None, lists.build(), DeviceOptions(), muf_given=False, cache_given=False)
    assert (got.muf, got.max_in_flight) == (1, 3)  # a graph file: its own bound, the default tables
    with pytest.raises(SettingsError, match="--mak 4 x 20 messages per instance needs 80"):
        sized_options(20, FIXED, 1, mak=4, cache_slots=40)
    with pytest.raises(SettingsError, match="holds no instance"):
        sized_options(20, FIXED, 1, cache_slots=10)
    # a --mak whose tables would exceed the limit names --mak and the most it may be
    with pytest.raises(SettingsError, match=r"--mak 300 x 20 .* give at most --mak 204"):
        sized_options(20, FIXED, 1, mak=300)


@pytest.mark.gxx
def test_a_c_simulation_built_for_other_settings_is_refused(tmp_path):
    """The issue's case: a C simulation built at 8-bit precision must not train on 16-bit host
    numerics; nor a loop model with tag tables too small for its instances in flight."""
    spec = MODELS["mlp"]
    eight = NumericConfig("fixed", data=Precision(8, 4), weights=Precision(8, 6), grads=Precision(8, 6))
    project = write_project(build_design(spec.build(), DeviceOptions(numerics=eight, muf=8)), tmp_path / "m", rtl=False)
    config = TrainConfig(mak=4, muf=8, epochs=1, numerics="fixed")
    with pytest.raises(SettingsError, match="setting numerics: the C simulation in .* computes data Q8.4"):
        DeviceTrainer(spec, config, backend="csim", device=CsimDevice(project))
    lists = MODELS["list-rnn"]
    small = write_project(build_design(lists.build(), DeviceOptions(muf=16, cache_slots=40)), tmp_path / "l", rtl=False)
    with pytest.raises(SettingsError, match="setting mak: .*tag tables of 40 entries, and --mak 16"):
        DeviceTrainer(lists, TrainConfig(mak=16, muf=16, numerics="fixed"), backend="csim", device=CsimDevice(small))


class _Faulty(CpuDevice):
    """The numpy device model, a gradient for a tag nobody saw slipped into its 30th send."""

    sends = 0

    def send(self, msgs):  # type: ignore[no-untyped-def]
        self.sends += 1
        if self.sends == 30:
            ch = next(c for c in self.placement.channels if c.edge is not None and not self.placement.enters_device(c.edge))
            msgs = [*msgs, WireMessage(ch.channel, Kind.DATA, Direction.BWD, Tag(999999, ()),
                                       np.zeros((1, ch.spec.shapes[Kind.DATA].width), np.int64))]
        super().send(msgs)


@pytest.mark.parametrize("sticky", [False, True], ids=["raises", "flags"])
def test_a_device_fault_is_reset_and_training_goes_on_with_conservation_intact(sticky):
    spec = MODELS["mlp"]
    config = TrainConfig(mak=16, muf=8, epochs=2, numerics="fixed", optimizer=OptimizerConfig("adam", lr=3e-3))
    device = _Faulty(place(spec.build()), FIXED, muf=8, sticky=sticky)
    trainer = DeviceTrainer(spec, config, device=device)
    trainer.fit()
    summary = trainer.summary()
    assert summary["conservation_ok"] and summary["conservation_problems"] == []
    assert len(summary["faults"]) == 1 and "k_head" in summary["faults"][0]["status"]
    assert summary["device"]["soft_resets"] == 1
    assert summary["test_metric"] > 0.8
    assert trainer.runner.host.conservation_report() == []
