"""Hugging Face checkpoints of the BERT family to and from our parameter trees.

A checkpoint is `config.json` + `model.safetensors` or `pytorch_model.bin`, of BERT, ALBERT, ERNIE,
RoBERTa, XLM-R, CamemBERT, DistilBERT, ELECTRA, ModernBERT or EuroBERT.

The mapping is one table of (HF tensor name, our parameter path, layout). HF
stores linear weights as [out, in]; we store kernels as [in, out], with the
attention projections split into [H, heads, head_dim]. ALBERT's tensors map onto the
same tree: its `sop_classifier` is our `nsp` head, its `albert_layer_groups.g.
albert_layers.k` our `encoder/group_g/layer_k`.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Mapping

import numpy as np

from bert_jax.errors import CheckpointError
from bert_jax.host import paths
from bert_jax.models import layer_layout
from bert_jax.models.config import ROBERTA_TYPES, BertConfig, ConfigError
from bert_jax.models.task_heads import Head
from bert_jax.weights.config_json import from_hf_dict, read_config_file, to_hf_dict

# Per model type: the encoder's prefix, the heads' prefixes, the tensors HF writes that
# carry no information of their own, and the names that tell which heads are present.
_NAMES = {
    "bert": {"encoder": "bert.", "heads": ("cls.", "classifier.", "qa_outputs."),
             "derived": ("embeddings.position_ids", "cls.predictions.decoder.weight",
                         "cls.predictions.decoder.bias"),
             "pooler": "bert.pooler.dense.weight",
             "mlm": "cls.predictions.transform.dense.weight",
             "nsp": "cls.seq_relationship.weight", "decoder": "cls.predictions.decoder",
             "mlm_parts": ("cls.predictions.transform.dense",
                           "cls.predictions.transform.LayerNorm", "cls.predictions.bias")},
    # Roberta* / XLMRoberta* / Camembert*: BERT's tensors under `roberta.`, `lm_head` for
    # the MLM head (and, in a sequence classifier, `classifier.dense` for the pooler).
    "roberta": {"encoder": "roberta.", "heads": ("lm_head.", "classifier.", "qa_outputs."),
                "derived": ("embeddings.position_ids", "embeddings.token_type_ids",
                            "lm_head.decoder.weight", "lm_head.decoder.bias"),
                "pooler": "roberta.pooler.dense.weight", "mlm": "lm_head.dense.weight",
                "nsp": None, "decoder": "lm_head.decoder",
                "mlm_parts": ("lm_head.dense", "lm_head.layer_norm", "lm_head.bias")},
    # DistilBert*: no token types, no pooler but the sequence classifier's `pre_classifier`.
    "distilbert": {"encoder": "distilbert.",
                   "heads": ("vocab_transform.", "vocab_layer_norm.", "vocab_projector.",
                             "pre_classifier.", "classifier.", "qa_outputs."),
                   "derived": ("embeddings.position_ids", "vocab_projector.weight"),
                   "pooler": "pre_classifier.weight", "mlm": "vocab_transform.weight",
                   "nsp": None, "decoder": "vocab_projector"},
    "albert": {"encoder": "albert.",
               "heads": ("predictions.", "sop_classifier.", "classifier.", "qa_outputs."),
               "derived": ("embeddings.position_ids", "embeddings.token_type_ids",
                           "predictions.decoder.weight", "predictions.decoder.bias"),
               "pooler": "albert.pooler.weight", "mlm": "predictions.dense.weight",
               "nsp": "sop_classifier.classifier.weight", "decoder": "predictions.decoder"},
    # ModernBertModel / ModernBertForMaskedLM (MLM only: no pooler, no NSP).
    "modernbert": {"encoder": "model.", "heads": ("head.", "decoder."),
                   "derived": ("decoder.weight", "decoder.bias"), "pooler": None,
                   "mlm": "head.dense.weight", "nsp": None, "decoder": "decoder"},
    # EuroBertModel / EuroBertForMaskedLM: its lm_head is the MLM head, untied (no decoder
    # derived from the embeddings).
    "eurobert": {"encoder": "model.", "heads": ("lm_head.",), "derived": (), "pooler": None,
                 "mlm": "lm_head.weight", "nsp": None, "decoder": None},
    # ElectraModel / ElectraForPreTraining (discriminator) / ElectraForMaskedLM (generator),
    # whose tied decoder's bias `generator_lm_head.bias` is our MLM output bias.
    "electra": {"encoder": "electra.",
                "heads": ("discriminator_predictions.", "generator_predictions.",
                          "generator_lm_head.", "classifier.", "qa_outputs."),
                "derived": ("embeddings.position_ids", "embeddings.token_type_ids",
                            "generator_lm_head.weight"),
                "pooler": "electra.pooler.dense.weight",
                "mlm": "generator_predictions.dense.weight", "nsp": None,
                "decoder": "generator_lm_head",
                "discriminator": "discriminator_predictions.dense.weight"},
}


for _name in ("xlm-roberta", "camembert"):  # RoBERTa's architecture under other names
    _NAMES[_name] = _NAMES["roberta"]


class CheckpointMismatchError(CheckpointError):
    """A checkpoint whose tensors do not match the config (names the tensors)."""


class _Entry:
    """One tensor: its HF name, our path, and how to move between the layouts."""

    def __init__(self, hf_name: str, path: tuple[str, ...], hf_shape: tuple[int, ...],
                 to_ours: Callable[[np.ndarray], np.ndarray] = lambda x: x,
                 to_hf: Callable[[np.ndarray], np.ndarray] = lambda x: x):
        self.hf_name, self.path, self.hf_shape = hf_name, path, hf_shape
        self.to_ours, self.to_hf = to_ours, to_hf


def _linear(hf, path, n_in, n_out, in_shape=None, out_shape=None):
    """A torch Linear [out, in] <-> our kernel [*in_shape, *out_shape] and bias [*out_shape]."""
    in_shape, out_shape = in_shape or (n_in,), out_shape or (n_out,)
    return [
        _Entry(f"{hf}.weight", (*path, "kernel"), (n_out, n_in),
               lambda w: w.T.reshape(*in_shape, *out_shape),
               lambda k: k.reshape(n_in, n_out).T),
        _Entry(f"{hf}.bias", (*path, "bias"), (n_out,),
               lambda b: b.reshape(out_shape), lambda b: b.reshape(n_out)),
    ]


def _layer_norm(hf, path, size, bias=True):
    return [_Entry(f"{hf}.weight", (*path, "scale"), (size,)),
            *([_Entry(f"{hf}.bias", (*path, "bias"), (size,))] if bias else [])]


def _entries(config: BertConfig, heads: Mapping[str, int]) -> list[_Entry]:
    """The table for the encoder plus the given heads.

    Heads: {'mlm': V, 'nsp': 2, 'classifier': n, 'qa_outputs': 2}."""
    if config.model_type == "albert":
        return _albert_entries(config, heads)
    if config.model_type == "modernbert":
        return _modernbert_entries(config, heads)
    if config.model_type == "electra":
        return _electra_entries(config, heads)
    if config.model_type == "eurobert":
        return _eurobert_entries(config, heads)
    if config.model_type == "distilbert":
        return _distilbert_entries(config, heads)
    h, names = config.hidden_size, _NAMES[config.model_type]
    prefix = names["encoder"]
    out = _learned_embeddings(f"{prefix}embeddings", config)
    for k in range(config.num_hidden_layers):
        out += _attention_and_ffn(f"{prefix}encoder.layer.{k}",
                                  ("bert", "encoder", f"layer_{k}"), config, _BERT_LAYER)
    if "pooler" in heads:
        out += _linear(f"{prefix}pooler.dense", ("bert", "pooler"), h, h)
    if "mlm" in heads:
        if config.model_type in ROBERTA_TYPES and config.hidden_act != "gelu":
            raise CheckpointMismatchError(f"RoBERTa's lm_head applies gelu, but the config's "
                                          f"hidden_act is {config.hidden_act!r}")
        dense, norm, bias = names["mlm_parts"]
        out += _linear(dense, ("mlm", "transform"), h, h)
        out += _layer_norm(norm, ("mlm", "transform_layer_norm"), h)
        out.append(_Entry(bias, ("mlm", "output_bias"), (config.vocab_size,)))
    if "nsp" in heads:
        out += _linear("cls.seq_relationship", ("nsp",), h, 2)
    if "classifier" in heads:
        out += _linear("classifier", ("classifier",), h, heads["classifier"])
    if "qa_outputs" in heads:
        out += _linear("qa_outputs", ("qa_outputs",), h, 2)
    return out


def _learned_embeddings(hf: str, config: BertConfig) -> list[_Entry]:
    """BERT's word, position and token-type tables (those the config has) and LayerNorm."""
    h, ours = config.hidden_size, ("bert", "embeddings")
    out = [_Entry(f"{hf}.word_embeddings.weight", (*ours, "word_embeddings", "embedding"),
                  (config.vocab_size, h)),
           _Entry(f"{hf}.position_embeddings.weight",
                  (*ours, "position_embeddings", "embedding"),
                  (config.max_position_embeddings, h))]
    if config.type_vocab_size:
        out.append(_Entry(f"{hf}.token_type_embeddings.weight",
                          (*ours, "token_type_embeddings", "embedding"),
                          (config.type_vocab_size, h)))
    return out + _layer_norm(f"{hf}.LayerNorm", (*ours, "layer_norm"), h)


def _attention_and_ffn(hf: str, ours: tuple[str, ...], config: BertConfig,
                       names: Mapping[str, Any]) -> list[_Entry]:
    """One transformer layer; `names` gives HF's names of its parts."""
    h, n, d, i = (config.hidden_size, config.num_attention_heads, config.head_dim,
                  config.intermediate_size)
    out = []
    for proj, hf_proj in zip(("query", "key", "value"),
                             names.get("projections", ("query", "key", "value"))):
        out += _linear(f"{hf}.{names['qkv']}.{hf_proj}", (*ours, "attention", proj), h, h,
                       out_shape=(n, d))
    out += _linear(f"{hf}.{names['attention_output']}", (*ours, "attention", "output"), h, h,
                   in_shape=(n, d))
    out += _layer_norm(f"{hf}.{names['attention_norm']}", (*ours, "attention_layer_norm"), h)
    out += _linear(f"{hf}.{names['intermediate']}", (*ours, "intermediate"), h, i)
    out += _linear(f"{hf}.{names['output']}", (*ours, "output"), i, h)
    out += _layer_norm(f"{hf}.{names['output_norm']}", (*ours, "output_layer_norm"), h)
    return out


_BERT_LAYER = {"qkv": "attention.self", "attention_output": "attention.output.dense",
               "attention_norm": "attention.output.LayerNorm", "intermediate": "intermediate.dense",
               "output": "output.dense", "output_norm": "output.LayerNorm"}
_ALBERT_LAYER = {"qkv": "attention", "attention_output": "attention.dense",
                 "attention_norm": "attention.LayerNorm", "intermediate": "ffn",
                 "output": "ffn_output", "output_norm": "full_layer_layer_norm"}
_DISTILBERT_LAYER = {"qkv": "attention", "projections": ("q_lin", "k_lin", "v_lin"),
                     "attention_output": "attention.out_lin", "attention_norm": "sa_layer_norm",
                     "intermediate": "ffn.lin1", "output": "ffn.lin2",
                     "output_norm": "output_layer_norm"}


def _distilbert_entries(config: BertConfig, heads: Mapping[str, int]) -> list[_Entry]:
    """`_entries` for transformers' DistilBert* models.

    BERT's layers under other names, the sequence classifier's `pre_classifier` as the pooler,
    `vocab_*` as the MLM head."""
    h = config.hidden_size
    out = _learned_embeddings("distilbert.embeddings", config)
    for k in range(config.num_hidden_layers):
        out += _attention_and_ffn(f"distilbert.transformer.layer.{k}",
                                  ("bert", "encoder", f"layer_{k}"), config, _DISTILBERT_LAYER)
    if "pooler" in heads:
        out += _linear("pre_classifier", ("bert", "pooler"), h, h)
    if "mlm" in heads:
        out += _linear("vocab_transform", ("mlm", "transform"), h, h)
        out += _layer_norm("vocab_layer_norm", ("mlm", "transform_layer_norm"), h)
        out.append(_Entry("vocab_projector.bias", ("mlm", "output_bias"), (config.vocab_size,)))
    if "classifier" in heads:
        out += _linear("classifier", ("classifier",), h, heads["classifier"])
    if "qa_outputs" in heads:
        out += _linear("qa_outputs", ("qa_outputs",), h, 2)
    return out


def _albert_entries(config: BertConfig, heads: Mapping[str, int]) -> list[_Entry]:
    """`_entries` for transformers' Albert* models."""
    h, e = config.hidden_size, config.embedding_width
    emb, ours = "albert.embeddings", ("bert", "embeddings")
    out = [
        _Entry(f"{emb}.word_embeddings.weight", (*ours, "word_embeddings", "embedding"),
               (config.vocab_size, e)),
        _Entry(f"{emb}.position_embeddings.weight", (*ours, "position_embeddings", "embedding"),
               (config.max_position_embeddings, e)),
        _Entry(f"{emb}.token_type_embeddings.weight",
               (*ours, "token_type_embeddings", "embedding"), (config.type_vocab_size, e)),
        *_layer_norm(f"{emb}.LayerNorm", (*ours, "layer_norm"), e),
        *_linear("albert.encoder.embedding_hidden_mapping_in", (*ours, "projection"), e, h),
    ]
    for g in range(config.num_hidden_groups):
        for k in range(config.inner_group_num):
            out += _attention_and_ffn(
                f"albert.encoder.albert_layer_groups.{g}.albert_layers.{k}",
                ("bert", "encoder", f"group_{g}", f"layer_{k}"), config, _ALBERT_LAYER)
    if "pooler" in heads:
        out += _linear("albert.pooler", ("bert", "pooler"), h, h)
    if "mlm" in heads:
        out += _linear("predictions.dense", ("mlm", "transform"), h, e)
        out += _layer_norm("predictions.LayerNorm", ("mlm", "transform_layer_norm"), e)
        out.append(_Entry("predictions.bias", ("mlm", "output_bias"), (config.vocab_size,)))
    if "nsp" in heads:
        out += _linear("sop_classifier.classifier", ("nsp",), h, 2)
    if "classifier" in heads:
        out += _linear("classifier", ("classifier",), h, heads["classifier"])
    if "qa_outputs" in heads:
        out += _linear("qa_outputs", ("qa_outputs",), h, 2)
    return out


def _modernbert_entries(config: BertConfig, heads: Mapping[str, int]) -> list[_Entry]:
    """`_entries` for transformers' ModernBert* models, after `_split_fused`.

    Its fused `Wqkv` and `Wi` appear as the `Wq`, `Wk`, `Wv` and `Wi_in`, `Wi_gate` they hold."""
    h, n, d, i = (config.hidden_size, config.num_attention_heads, config.head_dim,
                  config.intermediate_size)
    bias, norm_bias = config.use_bias, config.norm_bias
    linear = lambda *a, **k: [e for e in _linear(*a, **k) if bias or e.path[-1] != "bias"]
    ours = ("bert", "embeddings")
    out = [_Entry("model.embeddings.tok_embeddings.weight", (*ours, "word_embeddings",
                                                            "embedding"), (config.vocab_size, h)),
           *_layer_norm("model.embeddings.norm", (*ours, "layer_norm"), h, norm_bias)]
    for k in range(config.num_hidden_layers):
        hf, layer = f"model.layers.{k}", ("bert", "encoder", f"layer_{k}")
        for proj, name in (("Wq", "query"), ("Wk", "key"), ("Wv", "value")):
            out += linear(f"{hf}.attn.{proj}", (*layer, "attention", name), h, h,
                          out_shape=(n, d))
        out += linear(f"{hf}.attn.Wo", (*layer, "attention", "output"), h, h, in_shape=(n, d))
        out += _layer_norm(f"{hf}.attn_norm", (*layer, "attention_layer_norm"), h, norm_bias)
        out += linear(f"{hf}.mlp.Wi_in", (*layer, "intermediate"), h, i)
        out += linear(f"{hf}.mlp.Wi_gate", (*layer, "gate"), h, i)
        out += linear(f"{hf}.mlp.Wo", (*layer, "output"), i, h)
        out += _layer_norm(f"{hf}.mlp_norm", (*layer, "output_layer_norm"), h, norm_bias)
    out += _layer_norm("model.final_norm", ("bert", "final_norm"), h, norm_bias)
    if "mlm" in heads:
        out += linear("head.dense", ("mlm", "transform"), h, h)
        out += _layer_norm("head.norm", ("mlm", "transform_layer_norm"), h, norm_bias)
        out.append(_Entry("decoder.bias", ("mlm", "output_bias"), (config.vocab_size,)))
    return out


def _eurobert_entries(config: BertConfig, heads: Mapping[str, int]) -> list[_Entry]:
    """`_entries` for transformers' EuroBert* models.

    Llama's names; its key and value projections have num_key_value_heads heads, its MLP's activated
    `gate_proj` is our `intermediate` and `up_proj` our `gate`."""
    h, n, kv, d, i = (config.hidden_size, config.num_attention_heads, config.kv_heads,
                      config.head_dim, config.intermediate_size)
    linear = lambda *a, **k: [e for e in _linear(*a, **k)
                              if config.use_bias or e.path[-1] != "bias"]
    norm = lambda hf, path: _layer_norm(hf, path, h, bias=False)
    out = [_Entry("model.embed_tokens.weight", ("bert", "embeddings", "word_embeddings",
                                                "embedding"), (config.vocab_size, h))]
    for k in range(config.num_hidden_layers):
        hf, layer = f"model.layers.{k}", ("bert", "encoder", f"layer_{k}")
        for proj, name, heads_out in (("q", "query", n), ("k", "key", kv), ("v", "value", kv)):
            out += linear(f"{hf}.self_attn.{proj}_proj", (*layer, "attention", name), h,
                          heads_out * d, out_shape=(heads_out, d))
        out += linear(f"{hf}.self_attn.o_proj", (*layer, "attention", "output"), h, h,
                      in_shape=(n, d))
        out += norm(f"{hf}.input_layernorm", (*layer, "attention_layer_norm"))
        out += linear(f"{hf}.mlp.gate_proj", (*layer, "intermediate"), h, i)
        out += linear(f"{hf}.mlp.up_proj", (*layer, "gate"), h, i)
        out += linear(f"{hf}.mlp.down_proj", (*layer, "output"), i, h)
        out += norm(f"{hf}.post_attention_layernorm", (*layer, "output_layer_norm"))
    out += norm("model.norm", ("bert", "final_norm"))
    if "mlm" in heads:
        out += linear("lm_head", ("mlm", "decoder"), h, config.vocab_size)
    return out


def _electra_entries(config: BertConfig, heads: Mapping[str, int]) -> list[_Entry]:
    """`_entries` for transformers' Electra* models.

    BERT's layers, embeddings of width E with an `embeddings_project` to H where E differs, the
    discriminator's and the generator's heads."""
    h, e, v = config.hidden_size, config.embedding_width, config.vocab_size
    emb, ours = "electra.embeddings", ("bert", "embeddings")
    out = [
        _Entry(f"{emb}.word_embeddings.weight", (*ours, "word_embeddings", "embedding"), (v, e)),
        _Entry(f"{emb}.position_embeddings.weight", (*ours, "position_embeddings", "embedding"),
               (config.max_position_embeddings, e)),
        _Entry(f"{emb}.token_type_embeddings.weight",
               (*ours, "token_type_embeddings", "embedding"), (config.type_vocab_size, e)),
        *_layer_norm(f"{emb}.LayerNorm", (*ours, "layer_norm"), e),
    ]
    if config.factorized_embeddings:
        out += _linear("electra.embeddings_project", (*ours, "projection"), e, h)
    for k in range(config.num_hidden_layers):
        out += _attention_and_ffn(f"electra.encoder.layer.{k}",
                                  ("bert", "encoder", f"layer_{k}"), config, _BERT_LAYER)
    if "pooler" in heads:  # ElectraForSequenceClassification's classifier.dense
        out += _linear("electra.pooler.dense", ("bert", "pooler"), h, h)
    if "discriminator" in heads:
        out += _linear("discriminator_predictions.dense", ("discriminator", "dense"), h, h)
        out += _linear("discriminator_predictions.dense_prediction",
                       ("discriminator", "prediction"), h, 1)
    if "mlm" in heads:
        if config.hidden_act != "gelu":  # transformers' generator head is always GELU
            raise CheckpointMismatchError(f"ELECTRA's generator head applies gelu, but the "
                                          f"config's hidden_act is {config.hidden_act!r}")
        out += _linear("generator_predictions.dense", ("mlm", "transform"), h, e)
        out += _layer_norm("generator_predictions.LayerNorm", ("mlm", "transform_layer_norm"), e)
        out.append(_Entry("generator_lm_head.bias", ("mlm", "output_bias"), (v,)))
    if "classifier" in heads:  # ElectraForTokenClassification's
        out += _linear("classifier", ("classifier",), h, heads["classifier"])
    if "qa_outputs" in heads:
        out += _linear("qa_outputs", ("qa_outputs",), h, 2)
    return out


def _split_fused(state: Mapping[str, np.ndarray], config: BertConfig) -> dict[str, np.ndarray]:
    """ModernBERT's fused tensors as separate ones, and its first layer's attention norm.

    Separate as `_modernbert_entries` names them. ModernBERT has no attention norm in the first
    layer (an identity), so it comes as ones and zeros: our layers all have one, layer 0 skips it
    (bert_jax.models.encoder.pre_norm)."""
    state = dict(state)
    for name in [k for k in state if ".attn.Wqkv." in k or ".mlp.Wi." in k]:
        value = state.pop(name)
        parts = (("Wq", "Wk", "Wv") if ".Wqkv." in name else ("Wi_in", "Wi_gate"))
        fused = "Wqkv" if ".Wqkv." in name else "Wi"
        if value.shape[0] % len(parts):
            raise CheckpointMismatchError(f"tensor {name} of shape {value.shape} does not "
                                          f"split into {len(parts)}")
        for part, piece in zip(parts, np.split(value, len(parts))):
            state[name.replace(f".{fused}.", f".{part}.")] = piece
    h = config.hidden_size
    state.setdefault("model.layers.0.attn_norm.weight", np.ones(h, np.float32))
    if config.norm_bias:
        state.setdefault("model.layers.0.attn_norm.bias", np.zeros(h, np.float32))
    return state


def _join_fused(state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`_split_fused` undone: transformers' tensor names, layer 0 without attn_norm."""
    state = {k: v for k, v in state.items() if not k.startswith("model.layers.0.attn_norm.")}
    for parts, fused in ((("Wq", "Wk", "Wv"), "Wqkv"), (("Wi_in", "Wi_gate"), "Wi")):
        for name in [k for k in state if f".{parts[0]}." in k]:
            pieces = [state.pop(name.replace(f".{parts[0]}.", f".{p}.")) for p in parts]
            state[name.replace(f".{parts[0]}.", f".{fused}.")] = np.concatenate(pieces)
    return state


# RoBERTa's and ELECTRA's sequence classifiers: a dense + activation on the first token
# (`classifier.dense`: our pooler, with the family's `pooler_act`), then `out_proj`.
_CLASSIFIER_HEAD = ("classifier.dense.", "classifier.out_proj.")


def _classifier_head_as_pooler(state: dict[str, np.ndarray], model_type: str
                               ) -> dict[str, np.ndarray]:
    if f"{_CLASSIFIER_HEAD[1]}weight" not in state:
        return state
    pooler = f"{_NAMES[model_type]['encoder']}pooler.dense."
    return {pooler + k[len(_CLASSIFIER_HEAD[0]):] if k.startswith(_CLASSIFIER_HEAD[0]) else
            "classifier." + k[len(_CLASSIFIER_HEAD[1]):] if k.startswith(_CLASSIFIER_HEAD[1])
            else k: v for k, v in state.items()}


def _pooler_as_classifier_head(state: dict[str, np.ndarray], model_type: str
                               ) -> dict[str, np.ndarray]:
    """`_classifier_head_as_pooler` undone, for a *ForSequenceClassification."""
    pooler = f"{_NAMES[model_type]['encoder']}pooler.dense."
    return {_CLASSIFIER_HEAD[0] + k[len(pooler):] if k.startswith(pooler) else
            _CLASSIFIER_HEAD[1] + k[len("classifier."):] if k.startswith("classifier.")
            else k: v for k, v in state.items()}


def _normalise_names(state: Mapping[str, np.ndarray],
                     model_type: str = "bert") -> dict[str, np.ndarray]:
    """HF names as BertFor* (AlbertFor*) writes them.

    `bert.` (`albert.`) before encoder tensors, LayerNorm `weight`/`bias`
    (old checkpoints say `gamma`/`beta`)."""
    names = _NAMES[model_type]
    out = {}
    for name, value in state.items():
        if not name.startswith((names["encoder"], *names["heads"])):
            name = names["encoder"] + name
        if "LayerNorm" in name:
            name = name.replace(".gamma", ".weight").replace(".beta", ".bias")
        out[name] = np.asarray(value)
    return out


def detect_heads(names, model_type: str = "bert") -> dict[str, Any]:
    """Which heads a set of (normalised) HF tensor names contains."""
    names, known = set(names), _NAMES[model_type]
    heads: dict[str, Any] = {}
    for head in ("pooler", "mlm", "nsp", "discriminator"):
        if known.get(head) and known[head] in names:
            heads[head] = True
    if "qa_outputs.weight" in names:
        heads["qa_outputs"] = True
    return heads


def params_from_hf(state: Mapping[str, np.ndarray], config: BertConfig) -> dict[str, Any]:
    """HF state dict (numpy) -> our parameter tree, laid out for `config.scan_layers`.

    Raises CheckpointMismatchError naming every missing, unexpected or mis-shaped tensor.
    """
    names = _NAMES[config.model_type]
    state = _normalise_names(state, config.model_type)
    if config.model_type == "modernbert":
        state = _split_fused(state, config)
    if config.model_type in (*ROBERTA_TYPES, "electra"):
        state = _classifier_head_as_pooler(state, config.model_type)
    heads = detect_heads(state, config.model_type)
    if "classifier.weight" in state:
        heads["classifier"] = state["classifier.weight"].shape[0]
    entries = _entries(config, heads)
    expected = {e.hf_name for e in entries}
    problems = [f"missing tensor {name}" for name in sorted(expected - set(state))]
    problems += [f"unexpected tensor {name}" for name in sorted(set(state) - expected)
                 if not name.endswith(names["derived"])]
    problems += [f"tensor {e.hf_name} has shape {tuple(state[e.hf_name].shape)}, the config "
                 f"implies {e.hf_shape}" for e in entries
                 if e.hf_name in state and tuple(state[e.hf_name].shape) != e.hf_shape]
    decoder = state.get(f"{names['decoder']}.weight")
    word_name = ("model.embeddings.tok_embeddings.weight" if config.model_type == "modernbert"
                 else f"{names['encoder']}embeddings.word_embeddings.weight")
    word = state.get(word_name)
    if decoder is not None and word is not None and decoder.shape == word.shape \
            and not np.array_equal(decoder, word):
        problems.append(f"tensor {names['decoder']}.weight is not tied to {word_name}; "
                        f"{config.model_type.upper()}'s decoder is tied")
    if problems:
        raise CheckpointMismatchError("checkpoint does not match the config:\n  "
                                      + "\n  ".join(problems))
    params: dict[str, Any] = {}
    for e in entries:
        node = params
        for key in e.path[:-1]:
            node = node.setdefault(key, {})
        node[e.path[-1]] = e.to_ours(state[e.hf_name].astype(np.float32))
    return layer_layout.match_layout(params, config.scan_layers)


def params_to_hf(params: Mapping[str, Any], config: BertConfig) -> dict[str, np.ndarray]:
    """Our parameter tree (any layout, any heads) -> HF state dict with BertFor* names.

    For ALBERT the names are AlbertFor*."""
    params = layer_layout.to_unscanned(dict(params))
    heads: dict[str, Any] = {k: True for k in ("mlm", "nsp", "qa_outputs", "discriminator")
                             if k in params}
    if "pooler" in params["bert"]:
        heads["pooler"] = True
    if "classifier" in params:
        heads["classifier"] = int(np.shape(params["classifier"]["kernel"])[-1])
    state = {}
    for e in _entries(config, heads):
        node = params
        for key in e.path:
            node = node[key]
        state[e.hf_name] = np.ascontiguousarray(e.to_hf(np.asarray(node, np.float32)))
    if "mlm" in heads and _NAMES[config.model_type]["decoder"]:  # a decoder tied to the words
        names = _NAMES[config.model_type]
        decoder, encoder = names["decoder"], names["encoder"]
        if config.model_type == "modernbert":
            state["decoder.weight"] = state["model.embeddings.tok_embeddings.weight"]
        elif config.model_type in ("electra", "distilbert"):  # a bias entry of its own
            state[f"{decoder}.weight"] = state[f"{encoder}embeddings.word_embeddings.weight"]
        else:
            state[f"{decoder}.weight"] = state[f"{encoder}embeddings.word_embeddings.weight"]
            state[f"{decoder}.bias"] = state[decoder.replace("decoder", "bias")]
    return _join_fused(state) if config.model_type == "modernbert" else state


def read_state_dict(directory: str | os.PathLike) -> dict[str, np.ndarray]:
    """The tensors of `model.safetensors` or `pytorch_model.bin` in an HF model directory."""
    safetensors_path = os.path.join(directory, "model.safetensors")
    bin_path = os.path.join(directory, "pytorch_model.bin")
    if os.path.exists(safetensors_path):
        from safetensors.numpy import load_file
        try:
            return load_file(safetensors_path)
        except Exception as e:  # safetensors raises its own error types
            raise CheckpointMismatchError(f"cannot read {safetensors_path}: {e}") from None
    if os.path.exists(bin_path):
        from bert_jax.weights.torch_pickle import load_torch_state_dict
        return load_torch_state_dict(bin_path)
    raise FileNotFoundError(f"no model.safetensors or pytorch_model.bin in {directory}")


# transformers' names for encoders that are not BERT's and not read (why, in a word).
_REFUSED = {"roberta-prelayernorm": "RoBERTa with LayerNorm before each sublayer"}


def hf_config(path: str | os.PathLike) -> tuple[BertConfig, bool]:
    """config.json as a BertConfig, and whether it is ERNIE's.

    ERNIE's has `model_type: ernie`: a BERT encoder under `ernie.` names, see `_ernie_as_bert`. The
    model types of `_REFUSED` are refused in one line."""
    try:
        with open(path, encoding="utf-8") as f:
            values = json.load(f)
    except (OSError, ValueError):
        values = None  # read_config_file says what is wrong
    model_type = values.get("model_type") if isinstance(values, dict) else None
    if model_type in _REFUSED:
        raise ConfigError(f"{path}: model_type {model_type!r} is not an encoder bert_jax "
                          f"reads ({_REFUSED[model_type]})")
    if model_type == "ernie":
        return from_hf_dict({**values, "model_type": "bert"}, source=str(path)), True
    return read_config_file(path), False


def _ernie_as_bert(state: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """ERNIE's tensors under BERT's names.

    ERNIE 2.0/3.0 (`use_task_id`) add a task-type embedding to every token; transformers' ErnieModel
    uses task 0 unless given others, so its row 0 is folded into every row of the token-type table:
    the same sums, exactly."""
    state = {("bert." + k[len("ernie."):] if k.startswith("ernie.") else k): v
             for k, v in state.items()}
    task = state.pop("bert.embeddings.task_type_embeddings.weight", None)
    if task is not None:
        name = "bert.embeddings.token_type_embeddings.weight"
        state[name] = (np.asarray(state[name], np.float32) + np.asarray(task[0], np.float32))
    return state


def load_hf_dir(directory: str | os.PathLike, **config_overrides):
    """Reads an HF BERT, ERNIE or ALBERT directory: returns (config, params)."""
    config_path = os.path.join(directory, "config.json")
    if not os.path.exists(config_path):
        raise FileNotFoundError(f"no config.json in {directory}")
    config, ernie = hf_config(config_path)
    config = config.replace(**config_overrides)
    state = read_state_dict(directory)
    return config, params_from_hf(_ernie_as_bert(state) if ernie else state, config)


def save_hf_dir(directory: str | os.PathLike, config: BertConfig, params: Mapping[str, Any],
                architecture: str | None = None, extra_config: Mapping[str, Any] | None = None):
    """Writes `config.json` and `model.safetensors` that transformers loads."""
    from safetensors.numpy import save_file
    os.makedirs(directory, exist_ok=True)
    state = params_to_hf(params, config)
    if (architecture or "").endswith("ForSequenceClassification") and \
            config.model_type in (*ROBERTA_TYPES, "electra"):
        state = _pooler_as_classifier_head(state, config.model_type)
    # safetensors refuses tensors that share memory: the tied decoder is re-derived on load.
    decoder = _NAMES[config.model_type]["decoder"]
    state.pop(f"{decoder}.weight", None)
    if config.model_type not in ("modernbert", "electra", "distilbert"):  # bias: one copy
        state.pop(f"{decoder}.bias", None)
    hf_config = to_hf_dict(config)
    if architecture:
        hf_config["architectures"] = [architecture]
    hf_config.update(extra_config or {})
    with open(os.path.join(directory, "config.json"), "w", encoding="utf-8") as f:
        json.dump(hf_config, f, indent=2)
    save_file(state, os.path.join(directory, "model.safetensors"), metadata={"format": "pt"})


# --- the other files of an HF directory -----------------------------------------------

def wordpiece(vocab: str, do_lower_case: bool):
    from bert_jax.tokenization import load_tokenizer

    if not paths.exists(vocab):
        raise FileNotFoundError(f"no vocab.txt at {vocab}")
    return load_tokenizer(vocab, do_lower_case=do_lower_case)


def hf_task(hf_dir: str) -> dict[str, Any] | None:
    """The head kind where the weights cannot tell it.

    A multiple-choice classifier looks like a one-label sequence classifier, so config.json's
    `architectures` says."""
    architectures = json.loads(paths.read_text(paths.join(hf_dir, "config.json"))).get(
        "architectures") or []
    multiple_choice = any(str(a).endswith("ForMultipleChoice") for a in architectures)
    return Head("multiple_choice", 1).record() if multiple_choice else None


def hf_tokenizer(hf_dir: str):
    """(tokenizer, its file) of an HF directory, as transformers reads it.

    BERT's vocab.txt, ALBERT's spiece.model, a tokenizer.json, XLM-R's or CamemBERT's
    sentencepiece.bpe.model, RoBERTa's vocab.json + merges.txt (`tokenization.hf_files`)."""
    from bert_jax.tokenization.hf_files import read_hf_tokenizer

    return read_hf_tokenizer(hf_dir)
