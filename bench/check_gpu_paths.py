"""On a GPU: are the fast paths taken, and are they right? Prints one line per check.

    python bench/check_gpu_paths.py

1. Packed rows through cuDNN (`model.packed_cudnn_attention`) against XLA's attention
   with the dense [B, 1, L, L] mask: outputs and q/k/v gradients, relative error, and
   the time of each (and of cuDNN with M = L slots instead of the row's example bound).
2. FP8 (`fp8.fp8_dot_general`) on a feed-forward-sized product: whether the compiled
   program calls cuBLASLt's FP8 GEMM, its error against float32, and fwd+bwd time
   against bf16.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from bert_jax import fp8, model  # noqa: E402


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
        dense = model.attention_mask(ids > 0, ids)
        return jax.nn.dot_product_attention(q, k, v, mask=dense, implementation="xla")

    def cudnn(slots):
        segments = model.packed_segments(ids, slots)
        return lambda q, k, v: model.packed_cudnn_attention(q, k, v, segments)

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


def check_fp8(rows=16384, width=1024, inner=4096):
    keys = jax.random.split(jax.random.key(1), 3)
    x = jax.random.normal(keys[0], (rows, width), jnp.bfloat16)
    w = (jax.random.normal(keys[1], (width, inner), jnp.float32) * 0.02).astype(jnp.bfloat16)
    g = jax.random.normal(keys[2], (rows, inner), jnp.bfloat16)
    dims = (((1,), (0,)), ((), ()))

    def step(dot):
        def f(x, w):
            y, pull = jax.vjp(lambda x, w: dot(x, w, dims), x, w)
            return y, *pull(g.astype(y.dtype))
        return jax.jit(f)

    text = step(fp8.fp8_dot_general).lower(x, w).compile().as_text()
    calls = sorted({line.split('custom_call_target="')[1].split('"')[0]
                    for line in text.splitlines() if 'custom_call_target="' in line})
    count = lambda target: sum(f'custom_call_target="{target}"' in line
                               for line in text.splitlines())
    print(f"fp8 fwd+bwd program: custom calls {calls}; FP8 GEMMs "
          f"{count('__cublas$lt$matmul$f8')} of 3, bf16 GEMMs "
          f"{count('__cublas$gemm') + count('__cublas$lt$matmul')}")
    want = step(jax.lax.dot_general)(x.astype(jnp.float32), w.astype(jnp.float32))
    got = step(fp8.fp8_dot_general)(x, w)
    print("fp8 rel. error y/dx/dw vs float32: " +
          ", ".join(f"{rel(a, b):.1e}" for a, b in zip(got, want)))
    bf16 = timeit(step(jax.lax.dot_general), x, w)
    f8 = timeit(step(fp8.fp8_dot_general), x, w)
    flops = 6 * rows * width * inner
    print(f"[{rows}, {width}] x [{width}, {inner}] fwd+bwd: bf16 {bf16:.3f} ms "
          f"({flops / bf16 / 1e9:.0f} TFLOP/s), fp8 {f8:.3f} ms ({flops / f8 / 1e9:.0f} "
          f"TFLOP/s), {bf16 / f8:.2f}x")


if __name__ == "__main__":
    print(f"jax {jax.__version__}, {jax.devices()[0].device_kind}")
    for check in (check_packed, check_fp8):
        try:
            check()
        except Exception as e:  # report and go on: each check is independent
            print(f"{check.__name__} failed: {type(e).__name__}: {str(e)[:600]}")
