"""BERT's optimizer: schedule, decay mask, clipping, LAMB, accumulation."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from bert_jax.optim import bert_schedule, decay_mask, make_optimizer

PARAMS = {"bert": {"embeddings": {"layer_norm": {"scale": jnp.ones(3), "bias": jnp.zeros(3)},
                                  "word_embeddings": {"embedding": jnp.ones((4, 3))}},
                   "pooler": {"kernel": jnp.ones((3, 3)), "bias": jnp.zeros(3)}},
          "mlm": {"output_bias": jnp.zeros(4)}}


def test_schedule_is_googles_linear_warmup_then_decay():
    schedule = bert_schedule(1e-3, num_train_steps=10, warmup_steps=2)
    got = [float(schedule(i)) for i in range(11)]
    want = [0, 5e-4] + [1e-3 * (1 - i / 10) for i in range(2, 11)]
    np.testing.assert_allclose(got, want, atol=1e-9)
    assert float(bert_schedule(1e-3, 10, 0)(0)) == pytest.approx(1e-3)


def test_decay_mask_skips_layer_norm_and_biases():
    mask = decay_mask(PARAMS)
    assert mask["bert"]["embeddings"]["word_embeddings"]["embedding"]
    assert mask["bert"]["pooler"]["kernel"]
    assert not mask["bert"]["pooler"]["bias"]
    assert not mask["bert"]["embeddings"]["layer_norm"]["scale"]
    assert not mask["mlm"]["output_bias"]


@pytest.mark.parametrize("name", ["adamw", "lamb"])
def test_zero_gradient_only_decays_the_masked_params(name):
    tx, _ = make_optimizer(learning_rate=0.1, num_train_steps=10, warmup_steps=0,
                           optimizer=name, weight_decay=0.5)
    zeros = jax.tree.map(jnp.zeros_like, PARAMS)
    updates, _ = tx.update(zeros, tx.init(PARAMS), PARAMS)
    assert float(jnp.abs(updates["bert"]["pooler"]["kernel"]).sum()) > 0
    assert float(jnp.abs(updates["bert"]["embeddings"]["layer_norm"]["scale"]).sum()) == 0


def test_adamw_matches_optax_with_clipping():
    tx, _ = make_optimizer(learning_rate=1e-2, num_train_steps=10, warmup_steps=0,
                           weight_decay=0.0, max_grad_norm=1.0)
    ref = optax.chain(optax.clip_by_global_norm(1.0),
                      optax.adamw(optax.linear_schedule(1e-2, 0, 10), eps=1e-6,
                                  weight_decay=0.0))
    grads = jax.tree.map(lambda p: 10 * jnp.ones_like(p), PARAMS)
    got, _ = tx.update(grads, tx.init(PARAMS), PARAMS)
    want, _ = ref.update(grads, ref.init(PARAMS), PARAMS)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), got, want)


def test_gradient_accumulation_applies_the_mean_every_k_calls():
    tx, _ = make_optimizer(learning_rate=0.1, num_train_steps=10, warmup_steps=0,
                           grad_accum_steps=2, weight_decay=0.0)
    one, _ = make_optimizer(learning_rate=0.1, num_train_steps=10, warmup_steps=0,
                            weight_decay=0.0)
    g1 = jax.tree.map(jnp.ones_like, PARAMS)
    g2 = jax.tree.map(lambda p: 3 * jnp.ones_like(p), PARAMS)
    state = tx.init(PARAMS)
    first, state = tx.update(g1, state, PARAMS)
    assert all(float(jnp.abs(x).sum()) == 0 for x in jax.tree.leaves(first))
    second, _ = tx.update(g2, state, PARAMS)
    mean = jax.tree.map(lambda a, b: (a + b) / 2, g1, g2)
    want, _ = one.update(mean, one.init(PARAMS), PARAMS)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), second, want)


def test_bad_arguments_fail_clearly():
    with pytest.raises(ValueError, match="optimizer"):
        make_optimizer(learning_rate=1, num_train_steps=1, warmup_steps=0, optimizer="sgd")
    with pytest.raises(ValueError, match="warmup_steps"):
        make_optimizer(learning_rate=1, num_train_steps=1, warmup_steps=5)
