"""On a GPU: are the fast paths taken, and are they right? Prints one line per check.

    python bench/check_gpu_paths.py [--checks target,packed,fp8,dropout,gelu] [--small]

1. Packed rows through cuDNN (`attention.packed_cudnn_attention`) against XLA's attention
   with the dense [B, 1, L, L] mask: outputs and q/k/v gradients, relative error, and
   the time of each (and of cuDNN with M = L slots instead of the row's example bound).
2. FP8 on bert-large's two feed-forward products (the second with its GELU in front):
   whether the compiled programs call cuBLASLt's FP8 GEMM, the error against float32,
   and the fwd+bwd time of bf16, current scaling (`fp8.fp8_dot_general`) and delayed
   scaling's casts with the scales given (`delayed_fp8_dot`): what delayed scaling
   could gain, before its state is built.
3. Attention-probability dropout inside cuDNN's attention (`check_dropout`): whether its
   masks change from one execution to the next, and its time.
4. BERT's exact GELU as bert_jax computes it (`activations.exact_gelu`) against
   `jax.nn.gelu` in bert-large's feed-forward block (`check_gelu`).
5. The GPU as XLA describes it (`check_target`: its GpuTargetConfig), beside the one
   `bert_jax.aot.gpu_hosts` writes to compile for it without one.

`--small` runs small shapes, to try the code on a CPU (no cuDNN there: checks 1 and 3
fail). `--aot h200-1` runs no GPU: checks 2 and 4 compile each side for that GPU on
this machine and print what XLA made of it, kernel by kernel, with a roofline estimate
(`bench/hlo_kernels.py`; the `gpu-compile` extra).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import hlo_kernels  # noqa: E402  (bench/, beside this script)
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from bert_jax.models import activations, attention, fp8, jax_compat  # noqa: E402


def timeit(fn, *args, repeats=20):
    jax.block_until_ready(fn(*args))
    start = time.perf_counter()
    for _ in range(repeats):
        out = fn(*args)
    jax.block_until_ready(out)
    return (time.perf_counter() - start) / repeats * 1e3


def rel(a, b):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def check_packed(b=32, length=512, heads=16, dim=64, examples=3):
    keys = jax.random.split(jax.random.key(0), 4)
    q, k, v, g = (jax.random.normal(kk, (b, length, heads, dim), jnp.bfloat16) for kk in keys)
    rng = np.random.default_rng(0)
    ids = np.zeros((b, length), np.int32)
    for row in range(b):
        cuts = np.sort(rng.choice(np.arange(8, length - 8), examples - 1, replace=False))
        bounds = [0, *cuts, length - int(rng.integers(0, 40))]
        for e in range(examples):
            ids[row, bounds[e]:bounds[e + 1]] = e + 1
    ids = jnp.asarray(ids)
    tokens = (ids > 0)[:, :, None, None]

    def loss(attend):
        return lambda q, k, v: jnp.sum(jnp.where(tokens, attend(q, k, v), 0).astype(
            jnp.float32) * g.astype(jnp.float32))

    def reference(q, k, v):
        dense = attention.attention_mask(ids > 0, ids)
        return jax.nn.dot_product_attention(q, k, v, mask=dense, implementation="xla")

    def cudnn(slots):
        segments = attention.packed_segments(ids, slots)
        return lambda q, k, v: attention.packed_cudnn_attention(q, k, v, segments)

    grad = lambda f: jax.jit(jax.value_and_grad(loss(f), argnums=(0, 1, 2)))
    want = grad(reference)(q, k, v)
    got = grad(cudnn(examples))(q, k, v)
    errors = [rel(x, y) for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(want))]
    finite = all(bool(jnp.isfinite(x).all()) for x in jax.tree.leaves(got))
    print(f"packed cuDNN vs XLA dense mask: rel. error loss/dq/dk/dv "
          f"{', '.join(f'{e:.1e}' for e in errors)}; finite {finite}")
    times = {name: timeit(grad(f), q, k, v) for name, f in (
        ("xla dense mask", reference), (f"cudnn M={examples}", cudnn(examples)),
        (f"cudnn M={length}", cudnn(length)))}
    print("packed attention fwd+bwd ms: " + ", ".join(f"{n} {t:.2f}" for n, t in times.items()))


def check_dropout(b=32, length=512, heads=16, dim=64, rate=0.1):
    """Attention-probability dropout inside cuDNN's flash attention (jax's cuDNN module,
    `dropout_rate`, a static `seed`), which would give BERT's faithful attention dropout
    at the fused path's speed: do two executions of one program (two train steps) draw
    different masks, or does the static seed repeat them, which would rule it out for
    training? And its fwd+bwd time against cuDNN without dropout and XLA's einsum
    attention with bert_jax's threefry dropout."""
    from bert_jax.models.dropout import keep_mask
    cudnn = jax_compat.cudnn_attention()
    keys = jax.random.split(jax.random.key(2), 4)
    q, k, v, g = (jax.random.normal(kk, (b, length, heads, dim), jnp.bfloat16) for kk in keys)
    scale = dim ** -0.5

    def fused(dropout_rate):
        return lambda q, k, v: cudnn.dot_product_attention(
            q, k, v, scale=scale, seed=7, dropout_rate=dropout_rate, qkv_layout="BTNH")

    def einsum(q, k, v):
        scores = jnp.einsum("bqnd,bknd->bnqk", q, k).astype(jnp.float32) * scale
        probs = jax.nn.softmax(scores, axis=-1)
        keep, keep_prob = keep_mask(jax.random.key(3), probs.shape, rate)
        dropped = jnp.where(keep, probs / keep_prob, 0).astype(q.dtype)
        return jnp.einsum("bnqk,bknd->bqnd", dropped, v)

    once = jax.jit(fused(rate))
    first, second = once(q, k, v), once(q, k, v)
    plain = jax.jit(fused(0.0))(q, k, v)
    print(f"cuDNN attention dropout {rate}: rel. difference between two executions "
          f"{rel(first, second):.1e} (0: the masks repeat), from no dropout "
          f"{rel(first, plain):.1e}")
    grad = lambda f: jax.jit(jax.value_and_grad(
        lambda q, k, v: jnp.sum(f(q, k, v).astype(jnp.float32) * g.astype(jnp.float32)),
        argnums=(0, 1, 2)))
    times = {name: timeit(grad(f), q, k, v) for name, f in (
        ("cudnn no dropout", fused(0.0)), (f"cudnn dropout {rate}", fused(rate)),
        (f"xla einsum + threefry dropout {rate}", einsum))}
    print(f"attention [{b}, {length}, {heads}, {dim}] fwd+bwd ms: " +
          ", ".join(f"{n} {t:.2f}" for n, t in times.items()))


def check_gelu(rows=16384, width=1024, inner=4096):
    """bert-large's feed-forward block at seq 512, batch 32, bf16, fwd+bwd: BERT's exact
    GELU as `activations.exact_gelu` (keeps only its input for the backward pass) against
    `jax.nn.gelu(approximate=False)` (keeps three tensors of [rows, inner])."""
    keys = jax.random.split(jax.random.key(4), 5)
    normal = lambda key, shape, scale=1.0: (jax.random.normal(key, shape, jnp.float32)
                                            * scale).astype(jnp.bfloat16)
    x, g = normal(keys[0], (rows, width)), normal(keys[1], (rows, width))
    w_in, w_out = normal(keys[2], (width, inner), 0.02), normal(keys[3], (inner, width), 0.02)
    bias = normal(keys[4], (inner,), 0.02)

    def block(act):
        loss = lambda x, w_in, w_out, bias, g: jnp.sum(
            (act(x @ w_in + bias) @ w_out).astype(jnp.float32) * g.astype(jnp.float32))
        return jax.jit(jax.grad(loss, argnums=(0, 1, 2)))

    sides = {"jax.nn.gelu": block(lambda h: jax.nn.gelu(h, approximate=False)),
             "exact_gelu": block(activations.exact_gelu)}
    args = (x, w_in, w_out, bias, g)
    if AOT:
        print_aot("FFN block", sides, args)
        return
    got = [side(*args) for side in sides.values()]
    print("FFN block exact_gelu vs jax.nn.gelu, rel. difference dx/dw_in/dw_out: " +
          ", ".join(f"{rel(a, b):.1e}" for a, b in zip(*got)))
    times = {name: timeit(side, *args) for name, side in sides.items()}
    print(f"FFN block [{rows}, {width}] -> {inner} fwd+bwd ms: " + ", ".join(
        f"{name} {t:.3f}" for name, t in times.items()) +
          f"; {times['jax.nn.gelu'] / times['exact_gelu']:.2f}x")


DIMS = (((1,), (0,)), ((), ()))  # [rows, k] x [k, n]


@jax.custom_vjp
def delayed_fp8_dot(x, w, scales):
    """x @ w in FP8 with given scales (x, w, output gradient), as delayed scaling takes
    them from earlier steps' amax history, so no reduction has to finish before a cast;
    this step's amaxes come back as the scales' cotangent, which is how a train step
    would collect them for the history. What delayed scaling would save is measured
    here before its state (an amax history per matmul in the TrainState) is built."""
    return _delayed_fwd(x, w, scales)[0]


def _delayed_fwd(x, w, scales):
    q_x, q_w = fp8.cast(x, scales[0], fp8.E4M3), fp8.cast(w, scales[1], fp8.E4M3)
    amaxes = jnp.stack([jnp.max(jnp.abs(x)), jnp.max(jnp.abs(w))]).astype(jnp.float32)
    y = fp8.scaled_product(q_x, q_w, scales[0] * scales[1], DIMS, x.dtype)
    return y, (q_x, q_w, scales, amaxes)


def _delayed_bwd(residuals, g):
    q_x, q_w, scales, amaxes = residuals
    q_g = fp8.cast(g, scales[2], fp8.E5M2)
    dx, dw = fp8.gradient_products(q_g, scales[2], q_x, scales[0], q_w, scales[1], DIMS,
                                   g.dtype, g.dtype)
    observed = jnp.append(amaxes, jnp.max(jnp.abs(g)).astype(jnp.float32))
    return dx, dw, observed


delayed_fp8_dot.defvjp(_delayed_fwd, _delayed_bwd)


# The largest finite value of each operand's format: x, w (e4m3), output gradient (e5m2).
LARGEST = np.array([float(jnp.finfo(t).max) for t in (fp8.E4M3, fp8.E4M3, fp8.E5M2)],
                   np.float32)


def exact_scales(x, w, g):
    """The scales current scaling would compute for these operands: a delayed-scaling
    history that has seen exactly them."""
    amaxes = jnp.stack([jnp.max(jnp.abs(a)).astype(jnp.float32) for a in (x, w, g)])
    return amaxes / LARGEST


def fp8_gemm_count(compiled) -> int:
    return sum('custom_call_target="__cublas$lt$matmul$f8"' in line
               for line in compiled.as_text().splitlines())


def check_fp8(rows=16384, width=1024, inner=4096):
    """Two products of a bert-large layer at seq 512, batch 32, fwd+bwd: the FFN's first
    ([rows, width] x [width, inner], its input a LayerNorm's output) and its second with
    the GELU in front (gelu([rows, inner]) x [inner, width]), where a cast with a known
    scale can fuse into the GELU's pass. bf16, current scaling (bert_jax/models/fp8.py) and
    delayed scaling's cast with scales given (`delayed_fp8_dot`)."""
    keys = jax.random.split(jax.random.key(1), 6)
    normal = lambda key, shape, scale=1.0: (jax.random.normal(key, shape, jnp.float32)
                                            * scale).astype(jnp.bfloat16)
    cases = {
        "FFN in": (lambda x: x, normal(keys[0], (rows, width)),
                   normal(keys[1], (width, inner), 0.02), normal(keys[2], (rows, inner))),
        "GELU + FFN out": (lambda h: jax.nn.gelu(h, approximate=False),
                           normal(keys[3], (rows, inner)), normal(keys[4], (inner, width), 0.02),
                           normal(keys[5], (rows, width))),
    }
    flops = 6 * rows * width * inner
    for name, (producer, h, w, g) in cases.items():
        scales = exact_scales(producer(h), w, g)

        def step(dot):
            def f(h, w, scales, g):
                y, pull = jax.vjp(lambda h, w, s: dot(producer(h), w, s), h, w, scales)
                return y, *pull(g.astype(y.dtype))
            return jax.jit(f)

        dots = {"bf16": lambda x, w, s: jax.lax.dot_general(x, w, DIMS),
                "current": lambda x, w, s: fp8.fp8_dot_general(x, w, DIMS),
                "delayed": delayed_fp8_dot}
        if AOT:
            print_aot(name, {side: step(dot) for side, dot in dots.items()}, (h, w, scales, g))
            continue
        sides = {side: step(dot).lower(h, w, scales, g).compile() for side, dot in dots.items()}
        counts = {side: fp8_gemm_count(sides[side]) for side in ("current", "delayed")}
        want = jax.jit(lambda h, w: jax.vjp(
            lambda h, w: producer(h) @ w, h, w)[1](g.astype(jnp.float32)))(
                h.astype(jnp.float32), w.astype(jnp.float32))
        current = sides["current"](h, w, scales, g)
        delayed = sides["delayed"](h, w, scales, g)
        agree = ", ".join(f"{rel(a, b):.1e}" for a, b in zip(delayed[:3], current[:3]))
        amaxes_right = np.allclose(delayed[3], scales * LARGEST, rtol=1e-2)
        print(f"{name}: FP8 GEMMs current {counts['current']}, delayed {counts['delayed']} "
              f"of 3; current rel. error dh/dw vs float32 {rel(current[1], want[0]):.1e}/"
              f"{rel(current[2], want[1]):.1e}; delayed vs current y/dh/dw {agree}; "
              f"observed amaxes right: {amaxes_right}")
        times = {side: timeit(fn, h, w, scales, g) for side, fn in sides.items()}
        print(f"{name} [{rows}, {width if name == 'FFN in' else inner}] fwd+bwd ms: " +
              ", ".join(f"{side} {t:.3f} ({flops / t / 1e9:.0f} TFLOP/s, "
                        f"{times['bf16'] / t:.2f}x bf16)" for side, t in times.items()))


def check_target():
    from jax._src.lib import xla_client
    topology = xla_client.get_topology_for_devices(jax.devices())
    print("target config as XLA reads this GPU:\n" + str(topology.target_config))
    from bert_jax.aot import gpu_hosts
    known = [g for g in gpu_hosts.GPUS.values() if g.device_kind == jax.devices()[0].device_kind]
    print("bert_jax.aot.gpu_hosts writes:\n" + (gpu_hosts.target_config(known[0]) if known
                                                else "(no entry for this GPU)"))


AOT = None  # with --aot: the compile-only GPU device the checks compile for


def print_aot(title, sides, args):
    """Each side compiled for the --aot GPU: its kernels, bytes and estimated time."""
    for side, fn in sides.items():
        found = hlo_kernels.kernels(hlo_kernels.compile_for(fn, args, AOT).as_text())
        print(f"{title}, {side} ({AOT.device_kind}, compiled here): "
              f"{hlo_kernels.describe(found, top=6)}")


def main():
    global AOT
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checks", default="target,packed,fp8,dropout,gelu",
                        help="comma-separated: target, packed, fp8, dropout, gelu")
    parser.add_argument("--small", action="store_true",
                        help="small shapes: a quick run of the code on a CPU")
    parser.add_argument("--aot", default="",
                        help="GPU hosts (h200-1) to compile checks fp8 and gelu for, here")
    args = parser.parse_args()
    if args.aot:
        hlo_kernels.configure()
        AOT = hlo_kernels.gpu_devices(args.aot)[0]
    print(f"jax {jax.__version__}, {jax.devices()[0].device_kind}")
    small = {"packed": dict(b=2, length=64, heads=2, dim=16),
             "fp8": dict(rows=256, width=64, inner=128),
             "dropout": dict(b=2, length=64, heads=2, dim=16),
             "gelu": dict(rows=256, width=64, inner=128)}
    for name in args.checks.split(","):
        check = {"target": check_target, "packed": check_packed, "fp8": check_fp8,
                 "dropout": check_dropout, "gelu": check_gelu}[name]
        try:
            check(**(small.get(name, {}) if args.small else {}))
        except Exception as e:  # report and go on: each check is independent
            print(f"{check.__name__} failed: {type(e).__name__}: {str(e)[:600]}")


if __name__ == "__main__":
    main()
