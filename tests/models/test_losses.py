"""The pretraining loss against a hand computation, and packed pretraining rows through
`BertForPreTraining` and the loss against the same examples unpacked."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.data.packing import pack_rows
from bert_jax.models.heads import BertForPreTraining
from bert_jax.models.losses import pretraining_loss as pretraining_terms
from bert_jax.models.presets import preset
from bert_jax.train import train_step


def pretraining_loss(mlm_logits, nsp_logits, batch):
    """(loss, means) of the pretraining terms: MLM plus NSP."""
    terms = pretraining_terms(mlm_logits, nsp_logits, batch)
    return train_step.combine(terms, {"mlm_loss": 1.0, "nsp_loss": 1.0})


def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def hand_loss(logits, labels, weights):
    """Cross-entropy averaged over the weights; accuracy the same way (numpy)."""
    picked = np.take_along_axis(log_softmax(logits), labels[..., None], -1)[..., 0]
    correct = logits.argmax(-1) == labels
    return -(picked * weights).sum() / weights.sum(), (correct * weights).sum() / weights.sum()


def test_pretraining_loss_equals_a_hand_computation():
    """Three rows, four prediction slots: row 0 has two real predictions and two zero-weight
    padding slots, row 1 has all four, row 2 none (its slots are padding); NSP labels 0
    and 1. The zero-weight slots carry large logits on their labels, so counting them (or
    dividing by the slot count instead of the weight sum) moves the loss."""
    rng = np.random.default_rng(0)
    mlm_logits = rng.normal(size=(3, 4, 7)).astype(np.float32) * 3
    labels = rng.integers(0, 7, size=(3, 4)).astype(np.int32)
    weights = np.array([[1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]], np.float32)
    mlm_logits[weights == 0, labels[weights == 0]] = 50.0  # padding: would be "easy"
    nsp_logits = rng.normal(size=(3, 2)).astype(np.float32)
    nsp_labels = np.array([0, 1, 1], np.int32)
    batch = {"masked_lm_ids": labels, "masked_lm_weights": weights,
             "next_sentence_labels": nsp_labels}
    loss, metrics = pretraining_loss(jnp.asarray(mlm_logits), jnp.asarray(nsp_logits), batch)

    mlm, mlm_accuracy = hand_loss(mlm_logits.astype(np.float64), labels, weights)
    nsp, nsp_accuracy = hand_loss(nsp_logits.astype(np.float64), nsp_labels, np.ones(3))
    assert float(metrics["mlm_loss"]) == pytest.approx(mlm, rel=1e-5)
    assert float(metrics["nsp_loss"]) == pytest.approx(nsp, rel=1e-5)
    assert float(loss) == pytest.approx(mlm + nsp, rel=1e-5)
    assert float(metrics["mlm_accuracy"]) == pytest.approx(mlm_accuracy)
    assert float(metrics["nsp_accuracy"]) == pytest.approx(nsp_accuracy)

    # Packed form: NSP logits [B, K, 2] with next_sentence_weights; slot weight 0 is unused.
    nsp_packed = rng.normal(size=(2, 2, 2)).astype(np.float32)
    packed_labels = np.array([[1, 0], [0, 1]], np.int32)
    nsp_weights = np.array([[1, 1], [1, 0]], np.float32)
    batch.update(next_sentence_labels=packed_labels, next_sentence_weights=nsp_weights)
    _, metrics = pretraining_loss(jnp.asarray(mlm_logits), jnp.asarray(nsp_packed), batch)
    want, _ = hand_loss(nsp_packed.astype(np.float64), packed_labels, nsp_weights)
    assert float(metrics["nsp_loss"]) == pytest.approx(want, rel=1e-5)


CONFIG = preset("tiny", vocab_size=60, hidden_size=32, num_hidden_layers=2,
                    num_attention_heads=2, intermediate_size=64, max_position_embeddings=40,
                    hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def unpacked_examples():
    """Four examples of lengths 9, 13, 7 and 11 in rows of 16, up to 3 predictions each
    (example 2 has 2; its third slot is padding); NSP labels 1, 0, 0, 1."""
    rng = np.random.default_rng(1)
    lengths, predictions = [9, 13, 7, 11], [3, 3, 2, 3]
    n, length, slots = len(lengths), 16, 3
    out = {"input_ids": np.zeros((n, length), np.int32),
           "input_mask": np.zeros((n, length), np.int32),
           "segment_ids": np.zeros((n, length), np.int32),
           "masked_lm_positions": np.zeros((n, slots), np.int32),
           "masked_lm_ids": np.zeros((n, slots), np.int32),
           "masked_lm_weights": np.zeros((n, slots), np.float32),
           "next_sentence_labels": np.array([1, 0, 0, 1], np.int32)}
    for i, (size, count) in enumerate(zip(lengths, predictions)):
        out["input_ids"][i, :size] = rng.integers(5, CONFIG.vocab_size, size)
        out["input_ids"][i, 0] = 2  # [CLS]
        out["input_mask"][i, :size] = 1
        out["segment_ids"][i, size // 2:size] = 1
        out["masked_lm_positions"][i, :count] = np.sort(rng.choice(
            np.arange(1, size), count, replace=False))
        out["masked_lm_ids"][i, :count] = rng.integers(5, CONFIG.vocab_size, count)
        out["masked_lm_weights"][i, :count] = 1
    return out


@pytest.mark.long
def test_packed_rows_give_the_unpacked_logits_and_loss():
    """Examples (0, 1) and (2, 3) packed into two rows of 32 with `pack_rows`: the MLM
    logits of every real prediction, each example's NSP logits (from its own [CLS]) and
    the loss equal the unpacked batch's. Attending across examples, or positions not
    restarting per example, breaks it."""
    examples = unpacked_examples()
    packed = pack_rows(examples, [[0, 1], [2, 3]], max_seq_length=32, max_predictions=6,
                       max_examples=2)
    model = BertForPreTraining(CONFIG)
    params = model.init(jax.random.key(0), examples["input_ids"], examples["input_mask"],
                        examples["segment_ids"], examples["masked_lm_positions"])["params"]
    # Larger weights than the initialiser's make every mixing visible in the logits.
    params = jax.tree.map(lambda p: p * 4 if p.ndim == 2 else p, params)

    def run(batch, **extra):
        out = model.apply({"params": params}, batch["input_ids"], batch["input_mask"],
                          batch["segment_ids"], batch["masked_lm_positions"], **extra)
        return out, pretraining_loss(out.mlm_logits, out.nsp_logits, batch)

    single, (single_loss, single_metrics) = run(examples)
    pack, (pack_loss, pack_metrics) = run(
        packed, position_ids=packed["position_ids"], example_ids=packed["example_ids"],
        next_sentence_positions=packed["next_sentence_positions"])

    real = examples["masked_lm_weights"] > 0
    packed_real = packed["masked_lm_weights"] > 0
    np.testing.assert_allclose(np.asarray(pack.mlm_logits)[packed_real],
                               np.asarray(single.mlm_logits)[real], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(pack.nsp_logits).reshape(4, 2),
                               np.asarray(single.nsp_logits), rtol=1e-4, atol=1e-4)
    assert float(pack_loss) == pytest.approx(float(single_loss), rel=1e-5)
    for key in ("mlm_loss", "nsp_loss", "mlm_accuracy", "nsp_accuracy"):
        assert float(pack_metrics[key]) == pytest.approx(float(single_metrics[key]), rel=1e-5)


def test_the_one_hot_cross_entropy_is_optax_s_in_value_and_gradient():
    import optax

    from bert_jax.models.losses import softmax_cross_entropy
    logits = jax.random.normal(jax.random.key(0), (4, 5, 33)) * 5
    logits = logits.at[:, :, -3:].set(-jnp.inf)  # masked classes stay out of the pick
    labels = jax.random.randint(jax.random.key(1), (4, 5), 0, 30)
    ours = lambda x: softmax_cross_entropy(x, labels)
    optax_ = lambda x: optax.softmax_cross_entropy_with_integer_labels(x, labels)
    np.testing.assert_allclose(ours(logits), optax_(logits), rtol=1e-6)
    np.testing.assert_allclose(jax.grad(lambda x: ours(x).sum())(logits),
                               jax.grad(lambda x: optax_(x).sum())(logits), atol=1e-6)


def test_gather_positions_picks_rows_exactly():
    from bert_jax.models.encoder import gather_positions
    x = jax.random.normal(jax.random.key(0), (3, 16, 8))
    positions = jax.random.randint(jax.random.key(1), (3, 4), 0, 16)
    for dtype in (jnp.float32, jnp.bfloat16):
        np.testing.assert_array_equal(
            gather_positions(x.astype(dtype), positions),
            jnp.take_along_axis(x.astype(dtype), positions[..., None], axis=1))
