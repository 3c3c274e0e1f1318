"""FP8 matrix products with current per-tensor scaling (`BertConfig.fp8`).

`fp8_dot_general` is a drop-in `dot_general` for flax's `nn.Dense` and for
`jnp.einsum(..., _dot_general=...)`: the forward operands are scaled into float8 e4m3
by their own absolute maximum (the "current" scaling of torchao's float8 training),
the output gradient into e5m2, and each product is a float8 `dot_general`
(`scaled_product`). On Hopper XLA lowers these to cuBLASLt's FP8 GEMMs; elsewhere (CPU,
older GPUs) it upcasts them, so the same program runs, emulated, with FP8's rounding.

Current scaling needs no state: parameters and optimizer state are those of a bf16 run,
so checkpoints move freely between FP8 and bf16 runs. Its price is one reduction over
each operand before it is quantized, which XLA fuses into the producer where it can.
Delayed scaling (an amax history per tensor, as flax's `Fp8DirectDotGeneralOp` and
Transformer Engine keep) avoids that reduction at the cost of that extra state.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax.linen import fp8_ops

E4M3 = jnp.float8_e4m3fn  # forward operands: more mantissa
E5M2 = jnp.float8_e5m2    # gradients: more range


def quantize(x: jax.Array, fp8_dtype) -> tuple[jax.Array, jax.Array]:
    """(q, scale) with x ~= q * scale.

    q in `fp8_dtype`, scale a float32 scalar that maps max|x| onto the format's largest finite
    value."""
    amax = jnp.max(jnp.abs(x)).astype(jnp.float32)
    # An all-zero (or non-finite) operand keeps scale 1: its product is what it is.
    scale = jnp.where((amax > 0) & jnp.isfinite(amax), amax / _largest(fp8_dtype), 1.0)
    return cast(x, scale, fp8_dtype), scale


def cast(x: jax.Array, scale: jax.Array, fp8_dtype) -> jax.Array:
    """x / scale in `fp8_dtype`, clipped.

    float8 e4m3fn has no infinity, an overflow would become NaN. With a scale known before x
    (delayed scaling), XLA can do this in the same pass that produces x."""
    largest = _largest(fp8_dtype)
    return jnp.clip(x.astype(jnp.float32) / scale, -largest, largest).astype(fp8_dtype)


def _largest(fp8_dtype) -> jax.Array:
    return jnp.finfo(fp8_dtype).max.astype(jnp.float32)


def scaled_product(q_lhs, q_rhs, scale, dimension_numbers, out_dtype):
    """dot_general of two float8 operands, written in `out_dtype` and rescaled.

    On Hopper one cuBLASLt FP8 GEMM (`__cublas$lt$matmul$f8`). Not the dequantize-then-dot form:
    with XLA's default excess precision that one drops the float8 round trip and multiplies in bf16.
    Not a float32 output: writing it costs more than FP8 saves."""
    out = jax.lax.dot_general(q_lhs, q_rhs, dimension_numbers,
                              preferred_element_type=out_dtype)
    return out * scale.astype(out_dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _fp8_dot(lhs, rhs, dimension_numbers, out_dtype):
    return _fp8_dot_fwd(lhs, rhs, dimension_numbers, out_dtype)[0]


def _fp8_dot_fwd(lhs, rhs, dimension_numbers, out_dtype):
    q_lhs, s_lhs = quantize(lhs, E4M3)
    q_rhs, s_rhs = quantize(rhs, E4M3)
    out = scaled_product(q_lhs, q_rhs, s_lhs * s_rhs, dimension_numbers, out_dtype)
    # A scalar of the operands' dtype (`fp8_dot_general` casts both to it): their
    # gradients' dtype, which may differ from `out_dtype`.
    return out, (q_lhs, s_lhs, q_rhs, s_rhs, jnp.zeros((), lhs.dtype))


def _fp8_dot_bwd(dimension_numbers, out_dtype, residuals, g):
    q_lhs, s_lhs, q_rhs, s_rhs, operand_like = residuals
    q_g, s_g = quantize(g, E5M2)
    return gradient_products(q_g, s_g, q_lhs, s_lhs, q_rhs, s_rhs, dimension_numbers,
                             out_dtype, operand_like.dtype)


def gradient_products(q_g, s_g, q_lhs, s_lhs, q_rhs, s_rhs, dimension_numbers, out_dtype,
                      grad_dtype):
    """(d_lhs, d_rhs) of a float8 product, each one FP8 GEMM, in `grad_dtype`.

    From its quantized output gradient and operands (x ~= q * s): flax's transposes of a dot_general
    (the same ones jax's own rule uses); shapes come from the quantized operands."""
    transpose = dict(dimension_numbers=dimension_numbers, precision=None,
                     preferred_element_type=out_dtype)
    d_lhs = fp8_ops.dot_general_transpose_lhs(q_g, q_lhs, q_rhs, **transpose)
    d_rhs = fp8_ops.dot_general_transpose_rhs(q_g, q_lhs, q_rhs, **transpose)
    return ((d_lhs * (s_g * s_rhs).astype(out_dtype)).astype(grad_dtype),
            (d_rhs * (s_g * s_lhs).astype(out_dtype)).astype(grad_dtype))


_fp8_dot.defvjp(_fp8_dot_fwd, _fp8_dot_bwd)


def fp8_dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None,
                    **_unused):
    """`jax.lax.dot_general` in float8 with current scaling.

    The result has `preferred_element_type` or, by default, the operands' (promoted) dtype.
    `precision` is ignored: the product's precision is float8's."""
    del precision
    dtype = jnp.result_type(lhs, rhs)
    return _fp8_dot(lhs.astype(dtype), rhs.astype(dtype), dimension_numbers,
                    jnp.dtype(preferred_element_type or dtype))
