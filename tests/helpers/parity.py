"""Parity with transformers: random reference weights of a useful scale, padded batches,
and the MLM-only comparison."""

import numpy as np

from bert_jax.models.config import BertConfig
from bert_jax.models.encoder import BertModel
from bert_jax.models.heads import BertForPreTraining
from bert_jax.weights.config_json import to_hf_dict

TOL = 1e-4


def scale_weights(model):
    """Every weight of a transformers model random and of a size that keeps activations
    of order one: with BERT's 0.02 init activations stay so small that, e.g., erf and
    tanh GELU would agree within 1e-4. In place; returns the model."""
    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name.lower():  # BERT's LayerNorm, ModernBERT's *_norm
                p.add_(0.2 * torch.randn_like(p))
            elif p.ndim == 2 and "embeddings" not in name:
                p.copy_(torch.randn_like(p) / p.shape[1] ** 0.5)
            else:
                p.copy_(0.5 * torch.randn_like(p))
    return model


def padded_batch(vocab_size, lengths, max_len, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, vocab_size, (len(lengths), max_len)).astype(np.int32)
    mask = (np.arange(max_len)[None] < np.array(lengths)[:, None]).astype(np.int32)
    segments = (np.arange(max_len)[None] >= (np.array(lengths)[:, None] // 2)).astype(np.int32)
    ids, segments = ids * mask, segments * mask
    return ids, mask, segments


def state_dict_numpy(model):
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}


def assert_mlm_model_matches(config, params, ids, mask, hidden, logits, segments=None):
    """An MLM-only checkpoint's `params` (no pooler: a placeholder one, unused) give the
    reference's last hidden states and MLM logits at the real tokens (`mask`)."""
    import jax
    model = BertForPreTraining(config, next_sentence_prediction=False)
    if "pooler" not in params["bert"]:
        # zeros of the pooler's shapes: traced, not initialised (an init costs seconds of CPU)
        shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0), ids[:, :8])["params"]
        pooler = jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), shapes["bert"]["pooler"])
        params = {**params, "bert": {**params["bert"], "pooler": pooler}}
    out = model.apply({"params": params}, ids, mask, segments)
    real = np.asarray(mask).astype(bool)
    np.testing.assert_allclose(np.asarray(out.encoder.sequence_output)[real],
                               np.asarray(hidden)[real], atol=TOL, rtol=TOL)
    np.testing.assert_allclose(np.asarray(out.mlm_logits)[real], np.asarray(logits)[real],
                               atol=TOL, rtol=TOL)


ALBERT = BertConfig(model_type="albert", vocab_size=99, embedding_size=16, hidden_size=32,
                    num_hidden_layers=3, num_attention_heads=4, intermediate_size=37,
                    max_position_embeddings=64, hidden_act="gelu_new")


def albert_reference(config: BertConfig, cls=None, seed: int = 1, **hf_fields):
    """A transformers ALBERT of `config` (AlbertForPreTraining unless `cls`) with random
    weights of a useful scale."""
    import torch
    import transformers

    torch.manual_seed(seed)
    hf_config = transformers.AlbertConfig(**to_hf_dict(config), attn_implementation="eager",
                                          **hf_fields)
    model = (cls or transformers.AlbertForPreTraining)(hf_config)
    return scale_weights(model).eval()


def assert_hidden_states_match(config, params, ids, mask, expected):
    """The encoder of `params` gives the reference's hidden states (`expected`: its tuple of
    torch tensors, embeddings first) at the real tokens."""
    real = mask.astype(bool)
    encoder = {k: v for k, v in params["bert"].items() if k != "pooler"}
    states = BertModel(config, add_pooling_layer=False, output_hidden_states=True).apply(
        {"params": encoder}, ids, mask).hidden_states
    assert len(states) == len(expected)
    for ours, theirs in zip(states, expected):
        np.testing.assert_allclose(ours[real], theirs.numpy()[real], atol=TOL, rtol=TOL)
