"""`bert-jax compile`: a pretraining step compiled for TPU slices on this CPU machine
(needs libtpu, from the `tpu` extra; skipped without it). The model is a one-layer tiny
BERT so that each compile takes seconds."""

import json
import re
import subprocess
import sys

import jax
import pytest

from bert_jax.aot import collectives, tpu_slices
from bert_jax.aot import compile as tpu_compile
from bert_jax.errors import UserError
from bert_jax.pretrain.setup import Setup
from bert_jax.train.config_loader import load_config

MICRO = ["model={'preset': 'tiny', 'num_hidden_layers': 1, 'vocab_size': 512}",
         "max_seq_length=32", "max_predictions_per_seq=4", "global_batch_size=16",
         "rng_impl=unsafe_rbg", "compute_dtype=bfloat16"]
JSON_KEYS = {"topology", "chips", "hosts", "slices", "mesh", "fits", "hbm_per_chip_gb",
             "hbm_capacity_gb", "params_and_opt_gb", "temp_gb", "flops_per_step",
             "model_flops_per_step", "collective_bytes", "compile_s", "fused_attention_calls"}

needs_libtpu = pytest.mark.skipif(
    __import__("importlib").util.find_spec("libtpu") is None,
    reason="libtpu not installed (pip install -e .[tpu])")


def run_cli(*args):
    """`bert-jax compile ARGS`; the lines naming each phase ("compile: ...") are moved
    from .stderr to .progress."""
    result = subprocess.run([sys.executable, "-m", "bert_jax.cli", "compile", *args],
                            capture_output=True, text=True, timeout=900)
    lines = result.stderr.splitlines(keepends=True)
    result.progress = [line for line in lines if line.startswith("compile: ")]
    result.stderr = "".join(line for line in lines if not line.startswith("compile: "))
    return result


def test_topology_names_map_to_libtpu_arguments():
    v4 = tpu_slices.resolve("v4-128")
    assert (v4.chips, v4.describe_args()["topology_name"], v4.wrap) == (64, "v4:4x4x4",
                                                                        (True,) * 3)
    assert tpu_slices.resolve("v5litepod-16") == tpu_slices.resolve("v5e-16")
    assert tpu_slices.resolve("v5e-16").describe_args()["topology_name"] == "v5e:4x4"
    assert tpu_slices.resolve("v5p-8").describe_args()["topology_name"] == "v5:2x2x1"
    assert tpu_slices.resolve("v6e-256").hbm_bytes == 32 * tpu_slices.GIB
    with pytest.raises(UserError, match="v4 sizes are 8, 16"):
        tpu_slices.resolve("v4-12")
    with pytest.raises(UserError, match="unknown TPU topology"):
        tpu_slices.resolve("v9-8")


HLO = """HloModule m

%all-reduce-scatter.1 (input: bf16[1024]) -> bf16[256] {
  %input = bf16[1024]{0} parameter(0)
  %all-reduce.1 = bf16[1024]{0} all-reduce(%input), replica_groups={{0,1,2,3},{4,5,6,7}}, to_apply=%add
  ROOT %dynamic-slice.1 = bf16[256]{0} dynamic-slice(%all-reduce.1, %offset), dynamic_slice_sizes={256}
}

%body (p: (s32[], f32[1024])) -> (s32[], f32[1024]) {
  %ag = bf16[4096]{0} all-gather(bf16[1024]{0} %x), replica_groups=[2,4]<=[8], dimensions={0}
  %rs = f32[256]{0} reduce-scatter(f32[1024]{0} %y), replica_groups=[2,4]<=[4,2]T(1,0), dimensions={0}
  %fusion.1 = bf16[256]{0} fusion(%g), kind=kCustom, calls=%all-reduce-scatter.1, backend_config={"collective_algorithm_config":{"emitter":"SingleInputAllReduceScatterFusion"}}
}

%cond (q: (s32[], f32[64])) -> pred[] {
  %bound = s32[]{:T(128)} constant(5)
  %i = s32[]{:T(128)} get-tuple-element(%q), index=0
  ROOT %lt = pred[]{:T(512)} compare(%i, %bound), direction=LT
}

%body2 (q: (s32[], f32[64])) -> (s32[], f32[64]) {
  %a2a = f32[64]{0:T(128)} all-to-all(%z), replica_groups={{0,1,2,3},{4,5,6,7}}, dimensions={0}
}

ENTRY %main (a: f32[1024]) -> f32[1024] {
  %w = (s32[], f32[1024]) while(%t), condition=%cond0, body=%body, backend_config={"known_trip_count":{"n":"3"}}
  %w2 = (s32[], f32[64]) while(%t2), condition=%cond, body=%body2
  %ar = (f32[1024]{0}, f32[16]{0}) all-reduce(%a, %b), replica_groups=mesh['axis_0'=2,'axis_1'=4] {'axis_0'}, to_apply=%add
  %cp = (f32[8]{0}, f32[8]{0}, u32[], u32[]) collective-permute-start(%c), source_target_pairs={{0,1},{1,2}}
  %send = (f32[512]{0}, u32[], token[]) send(%d, %after-all), is_host_transfer=true, frontend_attributes={_xla_megascale_transfer_type="ALL_REDUCE"}
}
"""


def test_collective_bytes_count_loops_groups_and_slices():
    # Slices of 4 devices: the iota groups [2,4]<=[8] stay in a slice; the transposed
    # ones and the mesh-axis-0 all-reduce pair devices i and i+4 across slices. Loops
    # count by XLA's known trip count, else by their condition's bound (5).
    # A Megascale send (multi-slice programs) crosses slices: an all-reduce over 2.
    # libtpu's all-reduce-scatter fusion (all-reduce, then each chip's slice) is the
    # reduce-scatter it runs as, not an all-reduce.
    got = collectives.collective_bytes(HLO, 8, 2, slice_of=lambda i: i // 4)
    assert got == {"all-gather": 3 * 0.75 * 4096 * 2, "reduce-scatter": 3 * 0.75 * 1024 * 2,
                   "reduce-scatter" + collectives.ACROSS: 3 * 0.75 * 1024 * 4,
                   "all-reduce" + collectives.ACROSS: 2 * 0.5 * (1024 + 16 + 512) * 4,
                   "collective-permute": 8 * 4, "all-to-all": 5 * 0.75 * 64 * 4}


LOOP_BY_TWO = """HloModule m

%cond (p: (u32[], f32[8])) -> pred[] {
  %i = u32[]{:T(128)} get-tuple-element(%p), index=0
  %bound = u32[]{:T(128)} constant(4)
  ROOT %lt = pred[]{:T(512)} compare(%i, %bound), direction=LT
}

%body (p: (u32[], f32[8])) -> (u32[], f32[8]) {
  %i = u32[]{:T(128)} get-tuple-element(%p), index=0
  %two = u32[]{:T(128)} constant(2)
  %cp = (f32[8]{0}, f32[8]{0}, u32[], u32[]) collective-permute-start(%x), source_target_pairs={{0,1},{1,0}}
  %next = u32[]{:T(128)} add(%i, %two)
  ROOT %t = (u32[]{:T(128)}, f32[8]{0}) tuple(%next, %y)
}

ENTRY %main (a: f32[8]) -> f32[8] {
  %w = (u32[], f32[8]) while(%t0), condition=%cond, body=%body
}
"""


def test_a_loop_stepping_by_two_counts_its_trips():
    # libtpu's decomposed collectives: a u32 counter, 0, 2 < 4: two trips.
    assert collectives.collective_bytes(LOOP_BY_TWO, 2) == {"collective-permute": 2 * 32}


@pytest.fixture(scope="module")
def v5e_4(tmp_path_factory):
    hlo = str(tmp_path_factory.mktemp("hlo") / "step.hlo")
    result = run_cli("--config", "configs/pretrain.py:tiny", "--topology", "v5e-4",
                     "--hlo_out", hlo, *[f"--config.{o}" for o in MICRO])
    return result, hlo


@needs_libtpu
def test_compile_for_v5e_2x2_reports_the_fields(v5e_4):
    result, _ = v5e_4
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # libtpu's start-up warnings are silenced
    assert [line.split(" (")[0].strip() for line in result.progress] == [  # each phase
        "compile: building the model and its sharding over v5e-4",
        "compile: tracing the train step", "compile: XLA is compiling the train step"]
    assert "1 host, 1 slice" in result.stdout  # no "1 hosts"
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(report) == JSON_KEYS
    assert (report["topology"], report["chips"], report["hosts"], report["slices"]) == \
        ("v5e-4", 4, 1, 1)
    assert report["mesh"] == {"data": 4, "fsdp": 1, "tensor": 1} and report["fits"]
    assert 0 < report["params_and_opt_gb"] <= report["hbm_per_chip_gb"] < 16
    assert report["hbm_capacity_gb"] == 16
    # Gradients are averaged over the 4 data-parallel chips.
    assert report["collective_bytes"]["all-reduce"] > 0
    assert report["flops_per_step"] == pytest.approx(report["model_flops_per_step"], rel=0.5)
    assert "HBM/chip" in result.stdout and "v5 lite" in result.stdout


@pytest.mark.long
@needs_libtpu
def test_packed_rows_with_fused_attention_compile_to_splash_attention():
    packed = [o for o in MICRO if not o.startswith("max_seq_length")] + [
        "max_seq_length=128", "packing=true", "attention_impl=fused",
        "attention_probs_dropout_prob=0.0"]
    result = run_cli("--config", "configs/pretrain.py:tiny", "--topology", "v5e-4",
                     *[f"--config.{o}" for o in packed])
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    # One layer: the forward kernel and the backward's dq and dkv kernels.
    assert report["fused_attention_calls"] >= 2
    assert "Pallas splash attention" in result.stdout


@needs_libtpu
def test_dropout_bits_are_drawn_per_chip(v5e_4):
    """libtpu partitions RngBitGenerator only with the flag bert_jax sets: each chip draws
    the bits of its 16 / 4 rows, not of the global batch."""
    _, hlo = v5e_4
    with open(hlo) as f:
        shapes = re.findall(r"= u16\[([\d,]+)\]\S* rng-bit-generator", f.read())
    assert shapes, "no dropout draws found"
    assert {int(s.split(",")[0]) for s in shapes} == {4}, shapes


@needs_libtpu
def test_compiled_step_has_the_runs_shardings():
    config = load_config("configs/pretrain.py:tiny", MICRO + ["mesh_shape.fsdp=2",
                                                              "mesh_shape.data=2"])
    devices = tpu_compile.topology_devices(tpu_slices.resolve("v5e-4"))
    setup = Setup.build(config, 512, devices=devices, process_count=1)
    train_fn, _ = setup.jit_steps()
    abstract, shardings = setup.state_plan.abstract, setup.state_plan.shardings
    with jax.set_mesh(setup.partitioner.mesh):
        compiled = train_fn.lower(abstract, setup.abstract_batch()).compile()
    state_in = compiled.input_shardings[0][0]
    assert jax.tree.structure(state_in) == jax.tree.structure(shardings)
    for got, want, leaf in zip(jax.tree.leaves(state_in), jax.tree.leaves(shardings),
                               jax.tree.leaves(abstract)):
        assert got.is_equivalent_to(want, leaf.ndim)
    kernel = abstract.params["bert"]["encoder"]["layer_0"]["intermediate"]["kernel"]
    assert kernel.sharding.spec[0] == "fsdp"  # FSDP: parameters are split
    assert compiled.memory_analysis().alias_size_in_bytes > 0  # the state is donated


@needs_libtpu
def test_two_slices_cross_only_with_the_gradient_reduction():
    config = load_config("configs/pretrain.py:tiny",
                         MICRO + ["mesh_shape.fsdp=-1", "mesh_shape.data=1"])
    report = tpu_compile.compile_step(config, tpu_slices.resolve("v5e-4"), num_slices=2)
    assert (report["chips"], report["hosts"], report["slices"]) == (8, 2, 2)
    assert report["mesh"] == {"data": 2, "fsdp": 4, "tensor": 1}
    sent = report["collective_bytes"]
    across = {k: v for k, v in sent.items() if k.endswith(collectives.ACROSS)}
    # The gradient all-reduce is what crosses slices (besides a few batch-sized index
    # shuffles); FSDP's parameter gathers stay inside each slice.
    assert max(across, key=across.get) == "all-reduce" + collectives.ACROSS, sent
    assert across["all-reduce" + collectives.ACROSS] >= 0.75 * sum(across.values()), sent
    assert across.get("all-gather" + collectives.ACROSS, 0) < 0.01 * sent["all-gather"]


@needs_libtpu
def test_a_config_that_cannot_fit_is_refused_in_one_line():
    # 8M x 512 embedding: 16 GiB of fp32 parameters alone, 48 GiB with Adam's moments.
    result = run_cli("--config", "configs/pretrain.py:tiny", "--topology", "v5e-4",
                     *[f"--config.{o}" for o in MICRO],
                     "--config.model={'preset': 'tiny', 'hidden_size': 512, "
                     "'num_attention_heads': 8, 'intermediate_size': 512, "
                     "'num_hidden_layers': 1, 'vocab_size': 8388608}")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert re.search(r"\d+\.\d\d GiB", lines[0]) and "fsdp" in lines[0], lines[0]


def test_search_recommends_headroom_then_least_traffic_and_caches(monkeypatch, tmp_path):
    from bert_jax.aot import search as tpu_search
    monkeypatch.setenv("BERT_JAX_CACHE_DIR", str(tmp_path))
    calls = []

    def fake_compile(argv, **kwargs):
        calls.append(argv)
        overrides = [a for a in argv if a.startswith("--config.")]
        fsdp = "--config.mesh_shape.fsdp=-1" in overrides
        full = "--config.remat_policy='full'" in overrides
        report = {"fits": True, "hbm_capacity_gb": 16.0, "compile_s": 1.0,
                  "hbm_per_chip_gb": 15.5 if not (fsdp or full) else 12.0,
                  "collective_bytes": {"all-reduce": 10 if not fsdp else 30}}
        return subprocess.CompletedProcess(argv, 0, json.dumps(report) + "\n", "")

    monkeypatch.setattr(tpu_search.subprocess, "run", fake_compile)
    rows = tpu_search.search("configs/pretrain.py:tiny", [], "v5e-4", log=lambda line: None)
    # data parallel needs full remat for 10% headroom; FSDP fits at once but moves more.
    best = tpu_search.recommend(rows)
    assert (best["mesh"], best["remat_policy"], best["grad_accum_steps"]) == ("data", "full", 1)
    assert len(calls) == 4  # data: 2 rungs; fsdp: 1; fsdp+tensor2: 1
    tpu_search.search("configs/pretrain.py:tiny", [], "v5e-4", log=lambda line: None)
    assert len(calls) == 4  # every case came from the cache


@pytest.mark.slow
@needs_libtpu
def test_fsdp_gradients_of_scanned_layers_are_reduce_scattered():
    """tpu_large's layout (FSDP, scanned layers, remat) on one 8-chip host: each layer's
    weight gradients leave the scanned backward pass reduce-scattered (libtpu's
    all-reduce-scatter fusions), not all-reduced whole; what is still all-reduced is
    the bias and LayerNorm vectors and the loss's scalars."""
    config = load_config("configs/pretrain.py:tpu_large", MICRO + [
        "model={'preset': 'tiny', 'num_hidden_layers': 2, 'hidden_size': 256, "
        "'num_attention_heads': 4, 'intermediate_size': 1024, 'vocab_size': 512}"])
    assert config.scan_layers and config.mesh_shape.fsdp == -1
    report = tpu_compile.compile_step(config, tpu_slices.resolve("v5e-8"))
    sent = report["collective_bytes"]
    assert report["mesh"]["fsdp"] == 8
    # Counted as all-reduces, the fused reduce-scatters were 2x their traffic (before
    # 2026-11-26); all-reduced whole, the weight gradients would be most of it.
    assert sent.get("all-reduce", 0) < 0.05 * sent["reduce-scatter"], sent


def test_the_vocabulary_size_is_init_from_s(tmp_path):
    """A continued pretraining compiles with its model's vocabulary, as it will run."""
    import flax.linen as nn
    import jax.numpy as jnp

    from bert_jax.models.config import BertConfig
    from bert_jax.models.heads import BertForPreTraining
    from bert_jax.tokenization import load_tokenizer
    from bert_jax.weights import pretrained
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(40)]
    (tmp_path / "vocab.txt").write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
    bert_config = BertConfig(vocab_size=45, hidden_size=8, num_hidden_layers=1,
                             num_attention_heads=1, intermediate_size=8)
    ids = jnp.zeros((1, 4), jnp.int32)
    params = nn.unbox(BertForPreTraining(bert_config).init(jax.random.key(0), ids)["params"])
    pretrained.save(tmp_path / "model", bert_config, params,
                    tokenizer=load_tokenizer(str(tmp_path)))
    config = load_config("configs/pretrain.py:tiny", [f"init_from={tmp_path / 'model'}"])
    assert tpu_compile._vocab_size(config) == 45
    assert tpu_compile._vocab_size(load_config("configs/pretrain.py:tiny")) == 8192


@pytest.mark.long
@needs_libtpu
def test_the_modern_recipe_compiles_its_windows_to_splash_attention():
    """modernbert_tiny (packed rows) with fused attention: a global and a sliding-window
    layer, each through splash attention (the window as a local mask), scanned."""
    modern = ["model={'preset': 'modernbert-tiny', 'num_hidden_layers': 2, "
              "'global_attn_every_n_layers': 2, 'vocab_size': 512}", "max_seq_length=256",
              "max_predictions_per_seq=8", "global_batch_size=16", "rng_impl=unsafe_rbg",
              "compute_dtype=bfloat16", "attention_impl=fused", "scan_layers=true"]
    result = run_cli("--config", "configs/pretrain.py:modernbert_tiny", "--topology", "v5e-4",
                     *[f"--config.{o}" for o in modern])
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["fits"]
    # Both branches of the scanned layer's window choice: forward and backward kernels.
    assert report["fused_attention_calls"] >= 4
