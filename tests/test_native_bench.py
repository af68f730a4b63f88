"""bench/run.py's thread counts: the native runtime and PyTorch batched at 1 and 2 threads, each
ratio from each side's better one (issue #18, Deliver 5)."""

from __future__ import annotations

import pytest

from bench import run as bench


def test_ratios_take_each_sides_better_thread_count() -> None:
    systems = {
        "amp_async": {"instances_per_s": 100.0, "time_to_target_s": 20.0},
        "amp_native_async": {"instances_per_s": 900.0, "time_to_target_s": 4.0},
        "amp_native_async_2t": {"instances_per_s": 1200.0, "time_to_target_s": 6.0},
        "amp_native_sync": {"instances_per_s": 800.0, "time_to_target_s": None},
        "amp_native_sync_2t": {"instances_per_s": 700.0, "time_to_target_s": 5.0},
        "torch_batched": {"instances_per_s": 3000.0, "time_to_target_s": 3.0},
        "torch_batched_2t": {"instances_per_s": 5000.0, "time_to_target_s": 2.0},
        "torch_eager": {"instances_per_s": 50.0, "time_to_target_s": 40.0},
    }
    r = bench.ratios(systems)
    assert r["native_vs_numpy_instances_per_s"] == 12.0  # 2 threads: the higher rate
    assert r["native_vs_numpy_time_to_target"] == 5.0  # 1 thread: the shorter time
    assert r["native_async_vs_sync_time_to_target"] == 5.0 / 4.0  # sync: 1 thread missed, 2 reached
    assert r["native_async_2t_vs_sync_time_to_target"] == 5.0 / 6.0  # async on 2 threads only
    assert r["native_speedup_vs_torch_batched"] == 2.0 / 4.0  # torch batched's better: 2 threads
    assert r["speedup_vs_torch_batched"] == 2.0 / 20.0 and r["instances_per_s_vs_torch_batched"] == 100.0 / 5000.0
    assert r["native_speedup_vs_torch_eager"] == 10.0  # eager runs on one thread only


def test_best_counts_a_miss_as_slowest_and_needs_a_run() -> None:
    systems = {"amp_native_sync": {"time_to_target_s": None}, "amp_native_sync_2t": {"time_to_target_s": 9.0}}
    assert bench.best(systems, "amp_native_sync", "time_to_target_s") is systems["amp_native_sync_2t"]
    assert bench.best(systems, "amp_native_async", "time_to_target_s") is None


@pytest.mark.parametrize("system", ["amp_native_async_2t", "amp_native_sync_2t", "torch_batched_2t"])
def test_two_thread_systems_are_twins(system: str) -> None:
    """Each ``_2t`` system is its one-thread twin's backend and mode on 2 threads, with a deadline share."""
    twin = system.removesuffix(bench.THREAD_SUFFIX)
    assert bench.SYSTEMS[system] == bench.SYSTEMS[twin] and bench.THREADS[system] == 2
    assert twin not in bench.THREADS and system in bench.DEADLINE_WEIGHTS
