"""bench/bench_recipes.py's budget and data: CPU seconds per step read between logged wall
times, and SST-2 split into train, held-out validation and its dev set as the test (or
skipped without it)."""

from __future__ import annotations

import argparse

import bench_recipes


def test_cpu_per_step_interpolates_process_cpu_between_logged_steps():
    clock = bench_recipes.CpuClock()
    # 1 CPU-second per wall second until t=10, then 0.25 (the process starved by others).
    clock.samples = [(0.0, 0.0), (10.0, 10.0), (20.0, 12.5)]
    rows = [(1, 5.0), (11, 15.0)]  # steps 1 and 11: 5 + 1.25 CPU-seconds apart
    assert abs(bench_recipes.cpu_per_step(rows, clock) - 0.625) < 1e-9
    assert clock.cpu_at(-1.0) == 0.0 and clock.cpu_at(30.0) == 12.5  # clamped at the ends


def test_cpu_clock_samples_this_process_cpu_time():
    with bench_recipes.CpuClock(interval=0.01) as clock:
        sum(i * i for i in range(300_000))
    (w0, c0), (w1, c1) = clock.samples[0], clock.samples[-1]
    assert w1 > w0 and c1 > c0


def _args(tmp_path, shared):
    return argparse.Namespace(shared=str(shared), workdir=str(tmp_path / "work"),
                              sst2_train=100)


def test_sst2_splits_train_into_train_and_held_out_validation_and_tests_on_dev(tmp_path):
    source = tmp_path / "data" / "glue" / "SST-2"
    source.mkdir(parents=True)
    train = [f"sentence {i} \t{i % 2}\n" for i in range(600)]
    (source / "train.tsv").write_text("sentence\tlabel\n" + "".join(train))
    (source / "dev.tsv").write_text("sentence\tlabel\ngood \t1\n")
    overrides = dict(o[len("--config."):].split("=", 1)
                     for o in bench_recipes.sst2_overrides(_args(tmp_path, tmp_path / "data")))
    assert overrides["test_file"] == str(source / "dev.tsv")
    assert overrides["max_train_examples"] == "100"
    parts = {}
    for key in ("train_file", "validation_file"):
        with open(overrides[key]) as f:
            header, *parts[key] = f.readlines()
        assert header == "sentence\tlabel\n"
    assert len(parts["validation_file"]) == bench_recipes.SST2_VALIDATION
    assert sorted(parts["train_file"] + parts["validation_file"]) == sorted(train)


def test_sst2_is_skipped_without_the_shared_folder(tmp_path):
    assert bench_recipes.sst2_overrides(_args(tmp_path, tmp_path / "absent")) is None
