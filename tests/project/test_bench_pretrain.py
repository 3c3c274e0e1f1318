"""The pretraining bench's packed rows, lever names and lease plan (bench/bench_pretrain.py,
bench/bench_levers.py, bench/gpu_lease.py): what the GPU figures in docs/results.md are
measured on."""

import os
import sys
import time

import numpy as np
import pytest

from helpers import REPO

sys.path.insert(0, os.path.join(REPO,
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
        "cublaslt": False, "hidden_act": None}
    assert bench_levers.parse_variant("base128-tanh")["hidden_act"] == "gelu_new"
    assert bench_levers.parse_variant("base128-jaxgelu")["hidden_act"] == "jax_gelu"
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


GPU_HLO = """HloModule m

%fused_reduce (param_0: bf16[64,16]) -> f32[64] {
  %param_0 = bf16[64,16]{1,0} parameter(0)
}

ENTRY %main (a: bf16[64,32], b: bf16[32,16]) -> bf16[64,16] {
  %a = bf16[64,32]{1,0} parameter(0)
  %b = bf16[32,16]{1,0} parameter(1)
  %gemm = (bf16[64,16]{1,0}, s8[1024]{0}) custom-call(%a, %b), custom_call_target="__cublas$lt$matmul", backend_config={"gemm_backend_config":{"dot_dimension_numbers":{"lhs_contracting_dimensions":["1"],"rhs_contracting_dimensions":["0"],"lhs_batch_dimensions":[],"rhs_batch_dimensions":[]},"epilogue":"BIAS"}}
  %gte = bf16[64,16]{1,0} get-tuple-element(%gemm), index=0
  %red = f32[64]{0} fusion(%gte), kind=kInput, calls=%fused_reduce
  ROOT %out = bf16[64,16]{1,0} fusion(%gte, %red), kind=kLoop, calls=%fused_x
}
"""


def test_compiled_gpu_kernels_are_read_with_their_bytes_and_flops():
    import hlo_kernels
    gemm, reduce, loop = hlo_kernels.kernels(GPU_HLO)
    assert (gemm.kind, gemm.flops, gemm.read, gemm.written) == (
        "gemm", 2 * 64 * 16 * 32, (64 * 32 + 32 * 16) * 2, 64 * 16 * 2)  # no workspace
    assert gemm.detail == "__cublas$lt$matmul +BIAS" and not gemm.fp8
    assert (reduce.kind, reduce.read, reduce.written) == ("reduction", 2048, 256)
    assert (loop.kind, loop.read, loop.written) == ("elementwise", 2048 + 256, 2048)
    assert hlo_kernels.summary([gemm, reduce, loop])["gemms"] == 1
    # The roofline: the GEMM's bytes at the bandwidth outlast its FLOPs; none under launch.
    assert gemm.seconds == max(hlo_kernels.LAUNCH_S, (gemm.read + gemm.written)
                               / hlo_kernels.BANDWIDTH)
