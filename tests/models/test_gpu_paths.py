"""The fast paths' kernels on a GPU, taken and right: fused attention through cuDNN for
right-padded and for packed rows equals XLA's attention with the dense mask, FP8 products
run as cuBLASLt FP8 GEMMs with FP8's rounding, and BERT's exact GELU equals
`jax.nn.gelu`. Marked `gpu`: each skips, saying so, where JAX's default backend is not a
GPU. On a machine with one: `python -m pytest -m gpu tests`."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.models import activations, attention, fp8

pytestmark = pytest.mark.gpu

DIMS = (((1,), (0,)), ((), ()))  # [rows, k] x [k, n]


@pytest.fixture(scope="module")
def gpu():
    """The GPU the default backend computes on; skips the test without one."""
    if jax.default_backend() != "gpu":
        pytest.skip(f"needs a GPU: JAX's default backend is {jax.default_backend()}")
    return jax.devices()[0]


def rel_error(got, want) -> float:
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def normal(key, shape, scale=1.0):
    return (jax.random.normal(key, shape, jnp.float32) * scale).astype(jnp.bfloat16)


def custom_calls(fn, *args, target: str) -> int:
    """How many calls to the custom call `target` the compiled `fn(*args)` makes."""
    text = jax.jit(fn).lower(*args).compile().as_text()
    return text.count(f'custom_call_target="{target}')


def test_padded_rows_take_cudnn_attention_equal_to_xla_with_the_mask(gpu):
    q, k, v = (normal(key, (4, 128, 4, 64)) for key in jax.random.split(jax.random.key(0), 3))
    lengths = jnp.array([128, 100, 37, 1], jnp.int32)
    input_mask = jnp.arange(128)[None, :] < lengths[:, None]
    fused = lambda q, k, v: attention.fused_attention(
        q, k, v, attention.AttentionMask(lengths=lengths))
    dense = lambda q, k, v: jax.nn.dot_product_attention(
        q, k, v, mask=attention.attention_mask(input_mask), implementation="xla")
    assert custom_calls(fused, q, k, v, target="__cudnn$fmha") >= 1
    assert rel_error(jax.jit(fused)(q, k, v), jax.jit(dense)(q, k, v)) < 1e-2


def packed_rows(batch, length, examples):
    """example_ids [batch, length]: `examples` back to back from position 0 in each row,
    then up to 40 tokens of padding."""
    rng = np.random.default_rng(0)
    ids = np.zeros((batch, length), np.int32)
    for row in range(batch):
        cuts = np.sort(rng.choice(np.arange(8, length - 48), examples - 1, replace=False))
        bounds = [0, *cuts, length - int(rng.integers(0, 40))]
        for e in range(examples):
            ids[row, bounds[e]:bounds[e + 1]] = e + 1
    return jnp.asarray(ids)


def test_packed_rows_take_cudnn_packed_attention_equal_to_the_dense_mask(gpu):
    if not attention.cudnn_packed_available(jnp.bfloat16):
        pytest.skip(f"cuDNN's packed attention needs Hopper or later, not {gpu.device_kind}")
    q, k, v, g = (normal(key, (4, 256, 4, 64)) for key in jax.random.split(jax.random.key(1), 4))
    ids = packed_rows(4, 256, examples=3)
    tokens = (ids > 0)[:, :, None, None]

    def loss(attend):  # on the real tokens only: the two paths differ on padding rows
        return lambda q, k, v: jnp.sum(jnp.where(tokens, attend(q, k, v), 0).astype(
            jnp.float32) * g.astype(jnp.float32))

    packed = attention.packed_segments(ids, 3)
    cudnn = lambda q, k, v: attention.packed_cudnn_attention(q, k, v, packed)
    dense = lambda q, k, v: jax.nn.dot_product_attention(
        q, k, v, mask=attention.attention_mask(ids > 0, ids), implementation="xla")
    grad = lambda attend: jax.value_and_grad(loss(attend), argnums=(0, 1, 2))
    assert custom_calls(grad(cudnn), q, k, v, target="__cudnn$fmha") >= 2  # fwd and bwd
    got, want = jax.jit(grad(cudnn))(q, k, v), jax.jit(grad(dense))(q, k, v)
    (loss_got, grads_got), (loss_want, grads_want) = got, want
    assert rel_error(loss_got, loss_want) < 1e-2
    for name, a, b in zip(("dq", "dk", "dv"), grads_got, grads_want):
        assert bool(jnp.isfinite(a).all()) and rel_error(a, b) < 3e-2, name


def test_fp8_products_are_cublaslt_fp8_gemms_with_fp8_rounding(gpu):
    if float(getattr(gpu, "compute_capability", "0")) < 8.9:
        pytest.skip(f"FP8 GEMMs need compute capability 8.9 or later, not {gpu.device_kind}")
    keys = jax.random.split(jax.random.key(2), 3)
    x, w, g = normal(keys[0], (256, 128)), normal(keys[1], (128, 256), 0.05), \
        normal(keys[2], (256, 256))

    def products(dot):
        def f(x, w):
            y, pull = jax.vjp(lambda x, w: dot(x, w, DIMS), x, w)
            return (y, *pull(g.astype(y.dtype)))
        return f

    fp8_gemm = "__cublas$lt$matmul$f8"
    assert custom_calls(products(fp8.fp8_dot_general), x, w, target=fp8_gemm) == 3
    assert custom_calls(products(jax.lax.dot_general), x, w, target=fp8_gemm) == 0
    got = jax.jit(products(fp8.fp8_dot_general))(x, w)
    want = jax.jit(products(jax.lax.dot_general))(x.astype(jnp.float32), w.astype(jnp.float32))
    for name, a, b in zip(("y", "dx", "dw"), got, want):
        # As on a CPU (tests/models/test_fp8.py): FP8's rounding, not bf16's, nor a wrong product.
        assert 0.01 < rel_error(a, b) < 0.1, name


def test_exact_gelu_equals_jax_gelu_forward_and_backward(gpu):
    x = normal(jax.random.key(3), (1024, 512), 3.0)
    both = [jax.jit(jax.value_and_grad(lambda x, f=f: jnp.sum(f(x).astype(jnp.float32))))(x)
            for f in (activations.exact_gelu, lambda h: jax.nn.gelu(h, approximate=False))]
    (value, grad), (value_want, grad_want) = both
    assert rel_error(value, value_want) < 1e-2 and rel_error(grad, grad_want) < 1e-2
