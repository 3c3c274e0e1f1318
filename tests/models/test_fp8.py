"""FP8 matmuls (bert_jax/models/fp8.py) and packed rows in cuDNN's form (attention.packed_segments),
checked on CPU: FP8 runs there emulated, with FP8's rounding; on a GPU,
tests/models/test_gpu_paths.py; the GPU figures are in docs/results.md."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from bert_jax.models import attention, fp8
from bert_jax.models.config import ConfigError
from bert_jax.models.encoder import BertModel
from bert_jax.models.heads import BertForPreTraining
from bert_jax.models.presets import preset
from bert_jax.train.model_config import compute_fields


def rel_error(got, want):
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def test_fp8_dot_general_rounds_like_fp8_and_keeps_dtypes():
    keys = jax.random.split(jax.random.key(0), 3)
    x = jax.random.normal(keys[0], (64, 96), jnp.bfloat16)
    w = jax.random.normal(keys[1], (96, 32), jnp.bfloat16) * 0.05
    g = jax.random.normal(keys[2], (64, 32), jnp.float32)
    dims = (((1,), (0,)), ((), ()))

    def products(dot, x, w):
        y, pull = jax.vjp(lambda x, w: dot(x, w, dims), x, w)
        return (y, *pull(g.astype(y.dtype)))

    want = products(jax.lax.dot_general, x.astype(jnp.float32), w.astype(jnp.float32))
    got = jax.jit(lambda x, w: products(fp8.fp8_dot_general, x, w))(x, w)
    assert [a.dtype for a in got] == [jnp.bfloat16] * 3
    for name, a, b in zip(("y", "dx", "dw"), got, want):
        # e4m3 keeps 3 mantissa bits, e5m2 2: a few percent, far more than bf16's rounding
        # (so the operands really went through float8) and far less than a wrong product.
        assert 0.01 < rel_error(a, b) < 0.1, name


def test_quantize_keeps_zeros_and_never_overflows():
    q, scale = fp8.quantize(jnp.zeros((4, 4)), fp8.E4M3)
    assert float(scale) == 1.0 and not np.asarray(q, np.float32).any()
    x = jnp.array([1e30, -3e38, 5.0], jnp.float32)
    q, scale = fp8.quantize(x, fp8.E4M3)
    assert np.isfinite(np.asarray(q, np.float32) * float(scale)).all()


@pytest.mark.long
def test_fp8_model_has_the_bf16_parameters():
    inputs = jnp.ones((2, 16), jnp.int32)
    trees = [jax.tree.map(lambda x: (x.shape, x.dtype), nn.unbox(BertForPreTraining(
        preset("tiny", dtype="bfloat16", fp8=flag)).init(jax.random.key(0), inputs)["params"]))
        for flag in (False, True)]
    assert trees[0] == trees[1]  # checkpoints move between FP8 and bf16 runs


def test_compute_dtype_fp8_is_bfloat16_with_fp8_matmuls():
    assert compute_fields("fp8") == {"dtype": "bfloat16", "fp8": True}
    assert compute_fields("bfloat16") == {"dtype": "bfloat16", "fp8": False}
    with pytest.raises(ConfigError, match="compute_dtype must be one of"):
        compute_fields("float8")


def structured_batch(rng, batch, length, predictions, vocab):
    """Rows counting up from a random start: each masked token follows from its
    neighbours, so the loss falls fast."""
    start = rng.integers(5, vocab - length, (batch, 1))
    ids = (start + np.arange(length)).astype(np.int32)
    positions = np.sort(np.stack([rng.choice(np.arange(1, length - 1), predictions,
                                             replace=False) for _ in range(batch)]), -1)
    labels = np.take_along_axis(ids, positions, 1)
    masked = ids.copy()
    np.put_along_axis(masked, positions, 3, 1)
    return masked, positions.astype(np.int32), labels


def train_losses(fp8_matmuls, steps=200, seed=0):
    """The MLM loss of each of `steps` AdamW steps of a tiny model, all in one jitted scan."""
    config = preset("tiny", vocab_size=64, dtype="bfloat16", fp8=fp8_matmuls,
                    hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    net = BertForPreTraining(config, next_sentence_prediction=False)
    rng = np.random.default_rng(seed)
    batches = [np.stack(x) for x in zip(*(structured_batch(rng, 16, 16, 3, 64)
                                          for _ in range(steps)))]
    params = nn.unbox(net.init(jax.random.key(0), batches[0][0])["params"])
    tx = optax.adamw(1e-3)  # 3e-3 learned erratically on some CPUs (bf16 dots)

    def loss_fn(params, ids, positions, labels):
        logits = net.apply({"params": params}, ids, masked_lm_positions=positions).mlm_logits
        return optax.softmax_cross_entropy_with_integer_labels(
            logits.astype(jnp.float32), labels).mean()

    def step(carry, batch):
        params, opt_state = carry
        loss, grads = jax.value_and_grad(loss_fn)(params, *batch)
        updates, opt_state = tx.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), loss

    run = jax.jit(lambda params, batches: jax.lax.scan(step, (params, tx.init(params)),
                                                       batches)[1])
    return np.asarray(run(params, batches))


@pytest.mark.long
def test_fp8_training_tracks_bf16():
    bf16, f8 = train_losses(False), train_losses(True)
    assert np.isfinite(f8).all()
    for losses in (bf16, f8):
        assert losses[-20:].mean() < 0.6 * losses[:10].mean()  # both learn (4.07 at first)
    # Stated tolerance: over the last 50 of 200 steps the FP8 loss is within 15% of bf16's.
    # Measured on an AVX-512-BF16 CPU: 1.92 (FP8) against 1.97 (bf16); at lr 3e-3 the same
    # machine learned erratically (FP8 3.27 against 3.34), another CPU gave 3.07 against
    # 2.54. The GPU convergence check on bert-base is still to be run (docs/performance.md).
    assert abs(f8[-50:].mean() - bf16[-50:].mean()) < 0.15 * bf16[-50:].mean()


def test_packed_segments_list_each_example_then_the_padding():
    ids = jnp.array([[1, 1, 1, 2, 2, 0, 0], [1, 1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0, 0]])
    segments = attention.packed_segments(ids, 3)
    np.testing.assert_array_equal(segments.lengths, [[3, 2, 2, -1], [7, -1, -1, -1],
                                                     [2, 5, -1, -1]])
    np.testing.assert_array_equal(segments.starts, [[0, 3, 5, -1, -1], [0, -1, -1, -1, -1],
                                                    [0, 2, -1, -1, -1, ]])


def ragged_attention(q, k, v, segments):
    """softmax(q k^T / sqrt(D)) v within each segment of `segments` (lengths, starts), as
    cuDNN's packed layout describes it; padding rows zeroed as packed_cudnn_attention does."""
    out = np.zeros(q.shape, np.float32)
    q, k, v = (np.asarray(a, np.float32) for a in (q, k, v))
    for b in range(q.shape[0]):
        for n, s in zip(np.asarray(segments.lengths[b]), np.asarray(segments.starts[b])):
            if n < 0:
                continue
            span = slice(s, s + n)
            scores = np.einsum("qnd,knd->nqk", q[b, span], k[b, span]) / np.sqrt(q.shape[-1])
            probs = np.exp(scores - scores.max(-1, keepdims=True))
            out[b, span] = np.einsum("nqk,knd->qnd", probs / probs.sum(-1, keepdims=True),
                                     v[b, span])
    return jnp.where(segments.tokens[:, :, None, None], out, 0)


def test_packed_rows_take_cudnns_form_on_gpu_and_mean_the_dense_mask(monkeypatch):
    """On a GPU packed rows go to cuDNN as segments; here the kernel is replaced by an
    attention computed from those segments alone, which must give the model's outputs
    with XLA's dense-mask attention."""
    config = preset("tiny", attention_impl="fused", attention_probs_dropout_prob=0.0)
    ids = np.random.default_rng(0).integers(5, 1000, (2, 12)).astype(np.int32)
    example_ids = np.array([[1] * 5 + [2] * 4 + [0] * 3, [1] * 3 + [2] * 3 + [3] * 6])
    inputs = dict(input_ids=ids, input_mask=(example_ids > 0).astype(np.int32),
                  example_ids=example_ids,
                  position_ids=np.array([[*range(5), *range(4), 0, 0, 0],
                                         [*range(3), *range(3), *range(6)]]))
    params = nn.unbox(BertModel(config).init(jax.random.key(0), ids)["params"])
    want = BertModel(config).apply({"params": params}, **inputs).sequence_output
    calls = []

    def fake_cudnn(q, k, v, segments):
        calls.append(segments)
        return ragged_attention(q, k, v, segments).astype(q.dtype)

    monkeypatch.setattr(attention, "cudnn_packed_available", lambda dtype: True)
    monkeypatch.setattr(attention, "packed_cudnn_attention", fake_cudnn)
    got = BertModel(config).apply({"params": params}, **inputs, max_examples=3).sequence_output
    assert len(calls) == config.num_hidden_layers
    real = example_ids > 0
    np.testing.assert_allclose(np.asarray(got)[real], np.asarray(want)[real], atol=1e-4)
