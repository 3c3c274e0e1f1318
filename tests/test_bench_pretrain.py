"""The pretraining bench's packed rows, lever names and lease plan (bench/bench_pretrain.py,
bench/bench_levers.py, bench/gpu_lease.py): what the GPU figures in docs/performance.md
are measured on."""

import os
import sys
import time

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "bench"))
import bench_levers  # noqa: E402
import bench_pretrain  # noqa: E402
import gpu_lease  # noqa: E402


def test_packed_rows_follow_the_corpus_lengths_and_stay_valid():
    batch, examples = bench_pretrain.packed_batch(8192, 64, 512, 80)
    ids, mask = batch["example_ids"], batch["input_mask"]
    assert ids.shape == (64, 512) and examples == int(ids.max(1).sum())
    assert examples > 64  # some rows hold two examples
    for row in range(64):
        k = ids[row].max()
        # examples 1..k back to back from position 0, then padding
        assert list(np.unique(ids[row][ids[row] > 0])) == list(range(1, k + 1))
        assert (np.diff(ids[row][mask[row] > 0]) >= 0).all() and not ids[row][mask[row] == 0].any()
        real = batch["masked_lm_positions"][row][batch["masked_lm_weights"][row] > 0]
        assert (mask[row][real] == 1).all()
    values, counts = bench_pretrain.corpus_lengths()
    mean = (values * counts).sum() / counts.sum()
    assert abs(mask.sum() / examples - mean) < 0.1 * mean


def test_lever_names_are_checked():
    assert bench_levers.parse_variant("large512-fp8+packed") == {
        "case": "large512", "side": "bert_jax", "numerics": "fp8", "packed": True,
        "tanh": False, "cublaslt": False}
    assert bench_levers.parse_variant("base128-torch_compile")["side"] == "torch_compile"
    with pytest.raises(SystemExit, match="unknown setting"):
        bench_levers.parse_variant("base128-fp16")
    with pytest.raises(SystemExit, match="unknown case"):
        bench_levers.parse_variant("huge-fast")


def test_the_lease_plan_runs_known_scripts_and_variants_within_its_budget():
    for smoke in (False, True):
        for _, _, command in gpu_lease.plan(smoke):
            assert os.path.exists(os.path.join(gpu_lease.REPO, command[0])), command
            if "--variants" in command:
                for name in command[command.index("--variants") + 1].split(","):
                    bench_levers.parse_variant(name)
    # A lease is 15 minutes of device time, the start included: the default budget
    # (540 s) holds every step but the last (bert-large), which runs if time is left.
    estimates = [estimate for _, estimate, _ in gpu_lease.plan(False)]
    assert sum(estimates[:-1]) <= 540


def test_a_lease_step_past_its_time_is_cut_even_when_silent(tmp_path):
    start = time.monotonic()
    status = gpu_lease.run_step("sleeper", ["-c", "import time; print('up', flush=True); "
                                            "time.sleep(60)"], 2.0, str(tmp_path), dict(os.environ))
    assert status == "cut at the budget" and time.monotonic() - start < 30
    assert (tmp_path / "sleeper.log").read_text() == "up\n"
    assert gpu_lease.run_step("fails", ["-c", "raise SystemExit(3)"], 30.0, str(tmp_path),
                              dict(os.environ)) == "failed (rc 3)"
