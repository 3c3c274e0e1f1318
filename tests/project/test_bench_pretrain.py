"""The pretraining bench's packed rows, lever names and the GPU figures' steps
(bench/bench_pretrain.py, bench/bench_levers.py, bench/gpu_figures.py): what the GPU figures
in docs/results.md are measured on."""

import math
import os
import time

import bench_levers
import bench_pretrain
import gpu_figures
import numpy as np
import pytest


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
        "cublaslt": False, "hidden_act": None}
    assert bench_levers.parse_variant("base128-tanh")["hidden_act"] == "gelu_new"
    assert bench_levers.parse_variant("base128-jaxgelu")["hidden_act"] == "jax_gelu"
    assert bench_levers.parse_variant("base128-torch_compile")["side"] == "torch_compile"
    with pytest.raises(SystemExit, match="unknown setting"):
        bench_levers.parse_variant("base128-fp16")
    with pytest.raises(SystemExit, match="unknown case"):
        bench_levers.parse_variant("huge-fast")


def test_the_gpu_figures_run_known_scripts_and_variants():
    for smoke in (False, True):
        for _, estimate, command in gpu_figures.plan(smoke):
            assert os.path.exists(os.path.join(gpu_figures.REPO, command[0])), command
            assert estimate > 0
            if "--variants" in command:
                for name in command[command.index("--variants") + 1].split(","):
                    bench_levers.parse_variant(name)


def test_a_step_past_its_time_is_cut_even_when_silent(tmp_path):
    start = time.monotonic()
    status = gpu_figures.run_step("sleeper", ["-c", "import time; print('up', flush=True); "
                                              "time.sleep(60)"], 2.0, str(tmp_path),
                                  dict(os.environ))
    assert status == "cut at the time limit" and time.monotonic() - start < 30
    assert (tmp_path / "sleeper.log").read_text() == "up\n"
    assert gpu_figures.run_step("fails", ["-c", "raise SystemExit(3)"], math.inf,
                                str(tmp_path), dict(os.environ)) == "failed (rc 3)"


def test_steps_without_their_data_or_time_are_skipped_saying_why(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_figures, "FP8_DATA", "runs/absent_fp8_data.npz")
    steps = [("fp8", 1, ["bench/bench_fp8_convergence.py", "--data", gpu_figures.FP8_DATA]),
             ("long", 600, ["-c", "pass"])]
    rows = gpu_figures.run_plan(steps, 60.0, str(tmp_path))
    assert [(name, seconds) for name, _, seconds in rows] == [("fp8", 0.0), ("long", 0.0)]
    assert rows[0][1] == ("skipped: no runs/absent_fp8_data.npz: run "
                          "`python bench/gpu_figures.py --prepare` first")
    assert rows[1][1].startswith("skipped: ") and rows[1][1].endswith("s left, needs ~600")
