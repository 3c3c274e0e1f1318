"""BERT's optimizer: schedule, decay mask, clipping, LAMB (accumulation: test_training)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from bert_jax.train.optim import bert_schedule, decay_mask, make_optimizer

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


# BERT's decay mask for PARAMS written out by hand, so the references do not reuse
# `decay_mask`: LayerNorm parameters and biases do not decay.
HAND_MASK = {"bert": {"embeddings": {"layer_norm": {"scale": False, "bias": False},
                                     "word_embeddings": {"embedding": True}},
                      "pooler": {"kernel": True, "bias": False}},
             "mlm": {"output_bias": False}}
SCHEDULE = optax.linear_schedule(1e-2, 0, 10)  # bert_schedule without warmup


def varied_gradients(count, seed=0):
    """`count` gradient trees with different directions and global norms (0.3 to 30)."""
    keys = jax.random.split(jax.random.key(seed), count)
    leaves, treedef = jax.tree.flatten(PARAMS)
    out = []
    for i, key in enumerate(keys):
        noise = [jax.random.normal(k, p.shape) for k, p in
                 zip(jax.random.split(key, len(leaves)), leaves)]
        scale = (0.3, 30.0, 3.0, 0.5)[i % 4] / float(optax.global_norm(noise))
        out.append(jax.tree.unflatten(treedef, [scale * n for n in noise]))
    return out


def run_updates(tx, gradient_trees):
    """Params after applying `tx` to each gradient tree in turn."""
    params, state = PARAMS, tx.init(PARAMS)
    for grads in gradient_trees:
        updates, state = tx.update(grads, state, params)
        params = optax.apply_updates(params, updates)
    return params


def assert_trees_close(got, want, rtol=1e-5, atol=1e-7):
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=rtol, atol=atol), got, want)


def trees_differ(a, b):
    return any(not np.allclose(x, y, rtol=1e-4, atol=1e-6)
               for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


@pytest.mark.parametrize("name,reference", [("adamw", optax.adamw), ("lamb", optax.lamb)])
@pytest.mark.parametrize("max_grad_norm", [0.0, 1.0])
def test_optimizer_matches_optax_with_the_decay_mask(name, reference, max_grad_norm):
    """Four steps of varied gradients with weight decay 0.1 against optax's own AdamW /
    LAMB given the hand-written mask (and clipping to norm 1 when asked). Breaking the
    mask (decay everything) or dropping the clip makes this fail."""
    tx, _ = make_optimizer(learning_rate=1e-2, num_train_steps=10, warmup_steps=0,
                           optimizer=name, weight_decay=0.1, max_grad_norm=max_grad_norm)
    ref = reference(SCHEDULE, b1=0.9, b2=0.999, eps=1e-6, weight_decay=0.1, mask=HAND_MASK)
    if max_grad_norm:
        ref = optax.chain(optax.clip_by_global_norm(max_grad_norm), ref)
    grads = varied_gradients(4)
    got = run_updates(tx, grads)
    assert_trees_close(got, run_updates(ref, grads))
    # The cases can fail: decay reaches the masked params, and clipping changes the result.
    no_decay = reference(SCHEDULE, b1=0.9, b2=0.999, eps=1e-6, weight_decay=0.0)
    assert trees_differ(got["bert"]["pooler"]["kernel"],
                        run_updates(no_decay, grads)["bert"]["pooler"]["kernel"])
    unclipped, _ = make_optimizer(learning_rate=1e-2, num_train_steps=10, warmup_steps=0,
                                  optimizer=name, weight_decay=0.1, max_grad_norm=0.0)
    assert trees_differ(got, run_updates(unclipped, grads)) == bool(max_grad_norm)


def test_bad_arguments_fail_clearly():
    with pytest.raises(ValueError, match="optimizer"):
        make_optimizer(learning_rate=1, num_train_steps=1, warmup_steps=0, optimizer="sgd")
    with pytest.raises(ValueError, match="warmup_steps"):
        make_optimizer(learning_rate=1, num_train_steps=1, warmup_steps=5)
