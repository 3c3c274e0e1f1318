"""`bert-jax compile` for GPU hosts: a pretraining step compiled on this CPU machine by
XLA's compile-only CUDA client (needs the `gpu-compile` extra: jax's CUDA plugin and
cuDNN; the compiling tests skip without it). The model is a one-layer tiny BERT."""

import importlib.metadata
import json
import os
import subprocess
import sys

import pytest

from bert_jax.aot import compile as aot_compile
from bert_jax.aot import gpu_hosts
from bert_jax.errors import UserError
from bert_jax.host import backend_env

MICRO = ["model={'preset': 'tiny', 'num_hidden_layers': 1, 'vocab_size': 512}",
         "max_seq_length=128", "max_predictions_per_seq=4", "global_batch_size=16",
         "rng_impl=unsafe_rbg", "compute_dtype=bfloat16"]
FUSED = ["attention_impl=fused", "attention_probs_dropout_prob=0.0"]


def _plugin_installed() -> bool:
    try:
        gpu_hosts.installed_cuda()
        return True
    except UserError:
        return False


needs_plugin = pytest.mark.skipif(
    not _plugin_installed(), reason="jax's CUDA plugin and cuDNN not installed "
                                    "(pip install -e .[gpu-compile])")


def run_cli(*args, env=None):
    """`bert-jax compile ARGS`; the lines naming each phase ("compile: ...") are moved
    from .stderr to .progress."""
    result = subprocess.run([sys.executable, "-m", "bert_jax.cli", "compile", *args],
                            capture_output=True, text=True, timeout=900, env=env)
    lines = result.stderr.splitlines(keepends=True)
    result.progress = [line for line in lines if line.startswith("compile: ")]
    result.stderr = "".join(line for line in lines if not line.startswith("compile: "))
    return result


def test_host_names_map_to_the_cuda_clients_topology():
    h100 = gpu_hosts.resolve_hosts("H100-8", environ={})
    assert (h100.name, h100.chips, h100.hosts) == ("h100-8", 8, 1)
    assert gpu_hosts.resolve_hosts("h200-16", environ={}).hosts == 2
    assert gpu_hosts.resolve_hosts("a100-1", environ={}).hosts == 1
    # JAX takes 75% of a GPU's memory unless the run's environment says otherwise.
    assert h100.hbm_bytes == int(81559 * 2 ** 20 * 0.75)
    assert gpu_hosts.resolve_hosts("h100-8", {"XLA_PYTHON_CLIENT_MEM_FRACTION": ".9"}).hbm_bytes \
        == int(81559 * 2 ** 20 * 0.9)
    with pytest.raises(UserError, match="1, 2, 4 or a multiple of 8"):
        gpu_hosts.resolve_hosts("h100-12", environ={})
    with pytest.raises(UserError, match="unknown GPU host 'b300-8': one of a100, h100, h200"):
        gpu_hosts.resolve_hosts("b300-8", environ={})
    with pytest.raises(UserError, match="XLA_PYTHON_CLIENT_MEM_FRACTION='lots'"):
        gpu_hosts.resolve_hosts("h100-8", {"XLA_PYTHON_CLIENT_MEM_FRACTION": "lots"})
    # TPU slice names go to the TPU table.
    assert aot_compile.resolve_topology("v5e-16").chips == 16
    assert aot_compile.resolve_topology("h200-8").generation == "h200"


@needs_plugin
def test_the_topology_string_is_slices_hosts_gpus():
    assert gpu_hosts.resolve_hosts("h200-16", {}).describe_args(2)["topology"] == "2x2x8"
    config = gpu_hosts.resolve_hosts("a100-4", {}).describe_args()
    assert config["topology"] == "1x1x4" and config["platform"] == "cuda"
    assert "core_count: 108" in config["target_config"]
    assert "cuda_compute_capability { major: 8 minor: 0 }" in config["target_config"]


def test_without_the_plugin_it_says_what_to_install(monkeypatch):
    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    with pytest.raises(UserError, match=r"needs jax's CUDA plugin and cuDNN, which are not "
                                         r"installed: pip install -e \.\[gpu-compile\]"):
        aot_compile.topology_devices(gpu_hosts.resolve_hosts("h100-8", {}))


def test_the_cuda_plugin_is_kept_quiet_only_where_there_is_no_driver(monkeypatch):
    monkeypatch.setattr(backend_env, "nvidia_driver_present", lambda: False)
    environ = {}
    backend_env.configure_backends(environ)
    assert environ["JAX_SKIP_CUDA_CONSTRAINTS_CHECK"] == "1"
    monkeypatch.setattr(backend_env, "nvidia_driver_present", lambda: True)
    environ = {}
    backend_env.configure_backends(environ)
    assert "JAX_SKIP_CUDA_CONSTRAINTS_CHECK" not in environ


@pytest.fixture(scope="module")
def h100_16():
    result = run_cli("--config", "configs/pretrain.py:tiny", "--topology", "h100-16",
                     *[f"--config.{o}" for o in MICRO + FUSED])
    return result


@needs_plugin
def test_compile_for_two_h100_hosts_reports_the_fields(h100_16):
    result = h100_16
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # the CUDA plugin's start-up traceback is silenced
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert (report["topology"], report["chips"], report["hosts"]) == ("h100-16", 16, 2)
    assert report["mesh"] == {"data": 16, "fsdp": 1, "tensor": 1} and report["fits"]
    assert report["hbm_capacity_gb"] == pytest.approx(81559 / 1024 * 0.75, abs=1e-3)
    assert 0 < report["params_and_opt_gb"] <= report["hbm_per_chip_gb"]
    assert report["collective_bytes"]["all-reduce"] > 0  # the gradients, over 16 GPUs
    assert report["flops_per_step"] is None  # the CUDA client counts none
    # Right-padded rows take cuDNN's flash attention: forward and backward.
    assert report["fused_attention_calls"] >= 2
    assert "NVIDIA H100 80GB HBM3" in result.stdout
    assert "cuDNN flash attention" in result.stdout
    assert "JAX's 75% of 80 GiB" in result.stdout and "~15% above this plan" in result.stdout


@pytest.mark.long
@needs_plugin
def test_compiling_the_same_step_again_stays_quiet(tmp_path):
    """The persistent compilation cache is off for compile-only clients: a second run
    found the first one's entry and jax warned that it could not load it."""
    env = {**os.environ, "BERT_JAX_CACHE_DIR": str(tmp_path)}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    runs = [run_cli("--config", "configs/pretrain.py:tiny", "--topology", "h100-1",
                    *[f"--config.{o}" for o in MICRO], env=env) for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0]
    assert [r.stderr for r in runs] == ["", ""]


@pytest.mark.long
@needs_plugin
@pytest.mark.parametrize("fraction, says", [
    ("0.0000001", "does not fit a100-1: its parameters and optimizer state alone"),
    # the state fits this share; the compiled step's plan does not
    ("0.0001", "GiB per GPU, 0.01 GiB more than the 0 GiB of one a100 GPU")])
def test_a_gpu_too_small_is_refused_in_one_line(fraction, says):
    env = {**os.environ, "XLA_PYTHON_CLIENT_MEM_FRACTION": fraction}
    result = run_cli("--config", "configs/pretrain.py:tiny", "--topology", "a100-1",
                     *[f"--config.{o}" for o in MICRO], env=env)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert says in lines[0], lines[0]


# FP8 and bf16 products, forward and backward, compiled for an H200 here; prints how many
# cuBLASLt FP8 GEMMs each program calls. Its own process: XLA reads the flag that makes it
# compile matrix products as cuBLAS calls, as an H200 runs them (with no GPU it does not
# autotune), when it starts.
FP8_GEMMS = """
import jax, jax.numpy as jnp
from bert_jax.aot import compile as aot_compile
from bert_jax.host import backend_env
from bert_jax.models import fp8
backend_env.configure_backends()
device = aot_compile.topology_devices(aot_compile.resolve_topology("h200-1"))[0]
sharding = jax.sharding.SingleDeviceSharding(device)
dims = (((1,), (0,)), ((), ()))
def products(dot):
    def f(x, w, g):
        y, pull = jax.vjp(lambda x, w: dot(x, w, dims), x, w)
        return (y, *pull(g))
    return f
shapes = [jax.ShapeDtypeStruct(s, jnp.bfloat16, sharding=sharding)
          for s in ((256, 64), (64, 128), (256, 128))]
for name, dot in (("bf16", jax.lax.dot_general), ("fp8", fp8.fp8_dot_general)):
    text = jax.jit(products(dot)).lower(*shapes).compile().as_text()
    print(name, text.count('custom_call_target="__cublas$lt$matmul$f8"'))
"""


@needs_plugin
def test_fp8_products_compile_to_cublaslt_fp8_gemms_for_an_h200():
    """The FP8 path's three products (forward, both gradients) are cuBLASLt FP8 GEMMs in
    the program XLA compiles for an H200 (as one ran them), bf16's none."""
    flags = os.environ.get("XLA_FLAGS", "") + " --xla_gpu_enable_triton_gemm=false"
    result = subprocess.run([sys.executable, "-c", FP8_GEMMS], capture_output=True, text=True,
                            timeout=600, env={**os.environ, "XLA_FLAGS": flags.strip()})
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-2:] == ["bf16 0", "fp8 3"], result.stdout


@pytest.mark.long
@needs_plugin
@pytest.mark.parametrize("topology, cudnn", [("h100-8", True), ("a100-8", False)])
def test_packed_rows_take_cudnn_packed_attention_from_hopper_on(topology, cudnn):
    """jax's cuDNN module has packed attention for Hopper and later only: packed rows
    compile to it for H100s, and to XLA's attention with the dense mask for A100s (it
    refused to trace there before)."""
    packed = [o for o in MICRO if not o.startswith("max_seq_length")] + [
        "max_seq_length=128", "packing=true", *FUSED]
    result = run_cli("--config", "configs/pretrain.py:tiny", "--topology", topology,
                     *[f"--config.{o}" for o in packed])
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert (report["fused_attention_calls"] >= 2) == cudnn, report
