"""Model configs in the files other implementations write.

Google's `bert_config.json` (TF1 checkpoints) and Hugging Face's `config.json`, one reader and
writer per model type, beside the weight converters (`bert_jax.weights.tf1`, `bert_jax.weights.hf`).

A family that transformers names differently from us (ModernBERT's `hidden_activation`,
`norm_eps`, ...) maps its names here; the model reads only BertConfig's options.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Callable

from bert_jax.models.config import BertConfig, ConfigError

# Fields of Google's bert_config.json, with their Python types.
_GOOGLE_FIELDS = {
    "vocab_size": int,
    "hidden_size": int,
    "num_hidden_layers": int,
    "num_attention_heads": int,
    "intermediate_size": int,
    "hidden_act": str,
    "hidden_dropout_prob": float,
    "attention_probs_dropout_prob": float,
    "max_position_embeddings": int,
    "type_vocab_size": int,
    "initializer_range": float,
}
# ALBERT's fields of HF's config.json, with transformers' AlbertConfig defaults.
_ALBERT_FIELDS = {"embedding_size": 128, "num_hidden_groups": 1, "inner_group_num": 1}


def to_google_dict(config: BertConfig) -> dict[str, Any]:
    """Google's bert_config.json (with ALBERT's fields for ALBERT)."""
    albert = _ALBERT_FIELDS if config.model_type == "albert" else {}
    return {name: getattr(config, name) for name in (*_GOOGLE_FIELDS, *albert)}


def from_google_dict(values: dict[str, Any], source: str = "bert_config.json") -> BertConfig:
    return BertConfig(**_read_fields(values, _GOOGLE_FIELDS, source,
                                     optional={"layer_norm_eps": float}))


def to_hf_dict(config: BertConfig) -> dict[str, Any]:
    """transformers' config.json for `config`'s model type."""
    return _HF_FAMILIES[config.model_type][1](config)


def from_hf_dict(values: dict[str, Any], source: str = "config.json") -> BertConfig:
    """transformers' config.json (`model_type` bert when absent) as a BertConfig.

    `source` names the file in errors."""
    model_type = values.get("model_type", "bert")
    if model_type not in _HF_FAMILIES:
        raise ConfigError(f"{source}: model_type is {model_type!r}, expected one of "
                          f"{', '.join(_HF_FAMILIES)}")
    return BertConfig(**_HF_FAMILIES[model_type][0](values, source))


def read_config_file(path: str | os.PathLike) -> BertConfig:
    """Reads a model's config file as a BertConfig.

    Google's `bert_config.json`, HF's `config.json` or our own saved config (BertConfig's fields, as
    a model directory's metadata holds them)."""
    try:
        with open(path, encoding="utf-8") as f:
            values = json.load(f)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path} is not valid JSON: {e}") from None
    if not isinstance(values, dict):
        raise ConfigError(f"{path}: expected a JSON object, got {type(values).__name__}")
    if set(values) <= {f.name for f in dataclasses.fields(BertConfig)} and "dtype" in values:
        return BertConfig.from_dict(values)
    if "model_type" in values or "architectures" in values:
        return from_hf_dict(values, source=str(path))
    return from_google_dict(values, source=str(path))


# --- BERT and ALBERT: Google's fields, plus ALBERT's ---------------------------------

def _bert_from_hf(values: dict[str, Any], source: str) -> dict[str, Any]:
    position_type = values.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise ConfigError(f"{source}: position_embedding_type {position_type!r} is not "
                          "supported (BERT uses learned absolute positions)")
    return _read_fields(values, _GOOGLE_FIELDS, source, optional={"layer_norm_eps": float})


def _bert_to_hf(c: BertConfig) -> dict[str, Any]:
    return {
        "architectures": ["BertForPreTraining"],
        "model_type": c.model_type,
        **to_google_dict(c),
        "layer_norm_eps": c.layer_norm_eps,
        "pad_token_id": 0,
        "position_embedding_type": "absolute",
        "torch_dtype": "float32",
    }


def _albert_from_hf(values: dict[str, Any], source: str) -> dict[str, Any]:
    fields = {"model_type": "albert", **_bert_from_hf(values, source), **_ALBERT_FIELDS}
    fields.update(_read_fields(values, {}, source,
                               optional={name: int for name in _ALBERT_FIELDS}))
    return fields


def _albert_to_hf(c: BertConfig) -> dict[str, Any]:
    out = _bert_to_hf(c)  # with ALBERT's fields (to_google_dict)
    out["architectures"] = ["AlbertForPreTraining"]
    # transformers' ALBERT drops out before its classifiers at this rate.
    out["classifier_dropout_prob"] = c.hidden_dropout_prob
    return out


def _read_fields(values, fields, source, optional):
    out = {}
    for name, kind in {**fields, **optional}.items():
        if name not in values:
            if name in optional:
                continue
            raise ConfigError(f"{source}: missing field {name!r}")
        value = values[name]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ConfigError(f"{source}: field {name!r} should be {kind.__name__}, "
                              f"got {value!r}")
        out[name] = value
    return out


# --- ModernBERT --------------------------------------------------------------------

# ModernBertConfig's fields that are ours under other names, and its defaults.
_MODERNBERT_FIELDS = {"vocab_size": ("vocab_size", int, 50368),
                      "hidden_size": ("hidden_size", int, 768),
                      "num_hidden_layers": ("num_hidden_layers", int, 22),
                      "num_attention_heads": ("num_attention_heads", int, 12),
                      "intermediate_size": ("intermediate_size", int, 1152),
                      "hidden_activation": ("hidden_act", str, "gelu"),
                      "max_position_embeddings": ("max_position_embeddings", int, 8192),
                      "initializer_range": ("initializer_range", float, 0.02),
                      "norm_eps": ("layer_norm_eps", float, 1e-5),
                      "norm_bias": ("norm_bias", bool, False),
                      "local_attention": ("local_attention", int, 128),
                      "embedding_dropout": ("hidden_dropout_prob", float, 0.0),
                      "attention_dropout": ("attention_probs_dropout_prob", float, 0.0)}


def _modernbert_from_hf(values: dict[str, Any], source: str) -> dict[str, Any]:
    """transformers' ModernBertConfig (config.json) as our fields.

    Refuses what the model cannot express: biases on some dense layers only, an untied or bias-less
    decoder, a layer pattern other than a global layer every n, rope scaling."""
    out = {"model_type": "modernbert", "type_vocab_size": 0, "position_embedding_type": "rotary",
           "pre_norm": True, "final_norm": True, "gated_mlp": True}
    out.update(_renamed_fields(values, _MODERNBERT_FIELDS, source))
    biases = {values.get(k, False) for k in ("attention_bias", "mlp_bias", "classifier_bias")}
    if len(biases) > 1:
        raise ConfigError(f"{source}: attention_bias, mlp_bias and classifier_bias differ; "
                          "bert_jax has one use_bias for every dense layer")
    out["use_bias"] = biases.pop()
    if not values.get("decoder_bias", True) or not values.get("tie_word_embeddings", True):
        raise ConfigError(f"{source}: the MLM decoder must be tied and have a bias")
    rope = values.get("rope_parameters") or {}
    out["rope_theta"] = float((rope.get("full_attention") or {}).get(
        "rope_theta", values.get("global_rope_theta", 160000.0)))
    out["local_rope_theta"] = float((rope.get("sliding_attention") or {}).get(
        "rope_theta", values.get("local_rope_theta", 10000.0)))
    if any((r or {}).get("rope_type", "default") != "default" for r in rope.values()):
        raise ConfigError(f"{source}: rope scaling is not supported (default rotary only)")
    every = values.get("global_attn_every_n_layers", 3)
    out["global_attn_every_n_layers"] = every
    kinds = values.get("layer_types")
    expected = ["sliding_attention" if i % every else "full_attention"
                for i in range(out["num_hidden_layers"])]
    if kinds is not None and list(kinds) != expected:
        raise ConfigError(f"{source}: layer_types is not a global layer every "
                          f"{every} layers (the only pattern bert_jax has)")
    return out


def _modernbert_to_hf(c: BertConfig) -> dict[str, Any]:
    """Our config as transformers' ModernBertConfig (ModernBertForMaskedLM)."""
    out = {"architectures": ["ModernBertForMaskedLM"], "model_type": "modernbert"}
    out.update({hf: getattr(c, name) for hf, (name, _, _) in _MODERNBERT_FIELDS.items()})
    big = c.vocab_size >= 50368  # ModernBERT's special tokens, else our vocabularies' [PAD]
    out.update(
        mlp_dropout=c.hidden_dropout_prob, attention_bias=c.use_bias, mlp_bias=c.use_bias,
        classifier_bias=c.use_bias, classifier_activation=c.hidden_act, decoder_bias=True,
        tie_word_embeddings=True, global_attn_every_n_layers=c.global_attn_every_n_layers,
        layer_types=["sliding_attention" if c.is_local_layer(i) else "full_attention"
                     for i in range(c.num_hidden_layers)],
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": c.rope_theta},
                         "sliding_attention": {"rope_type": "default",
                                               "rope_theta": c.local_rope_theta}},
        pad_token_id=50283 if big else 0, bos_token_id=50281 if big else None,
        eos_token_id=50282 if big else None, cls_token_id=50281 if big else None,
        sep_token_id=50282 if big else None, torch_dtype="float32")
    return out


# --- EuroBERT ----------------------------------------------------------------------

# EuroBertConfig's fields that are ours under other names, and its defaults.
_EUROBERT_FIELDS = {"vocab_size": ("vocab_size", int, 128256),
                    "hidden_size": ("hidden_size", int, 768),
                    "num_hidden_layers": ("num_hidden_layers", int, 12),
                    "num_attention_heads": ("num_attention_heads", int, 12),
                    "intermediate_size": ("intermediate_size", int, 3072),
                    "hidden_act": ("hidden_act", str, "silu"),
                    "max_position_embeddings": ("max_position_embeddings", int, 8192),
                    "initializer_range": ("initializer_range", float, 0.02),
                    "rms_norm_eps": ("layer_norm_eps", float, 1e-5),
                    "attention_dropout": ("attention_probs_dropout_prob", float, 0.0)}
# EuroBERT's special tokens in its published (Llama-3) vocabulary.
_EUROBERT_IDS = {"bos_token_id": 128000, "eos_token_id": 128001, "pad_token_id": 128001,
                 "mask_token_id": 128002}


def _eurobert_from_hf(values: dict[str, Any], source: str) -> dict[str, Any]:
    """transformers' EuroBertConfig as our fields.

    A pre-norm RMSNorm encoder with SwiGLU, rotary positions and grouped-query attention, no token
    types, no embedding norm, a plain untied MLM decoder. Refuses what the model cannot express:
    biases on some dense layers only, a head size other than hidden / heads, a tied decoder, rope
    scaling."""
    out = {"model_type": "eurobert", "type_vocab_size": 0, "position_embedding_type": "rotary",
           "pre_norm": True, "final_norm": True, "gated_mlp": True, "norm_type": "rms_norm",
           "norm_bias": False, "embedding_norm": False, "mlm_transform": False,
           "hidden_dropout_prob": 0.0}
    out.update(_renamed_fields(values, _EUROBERT_FIELDS, source))
    if values.get("attention_bias", False) != values.get("mlp_bias", False):
        raise ConfigError(f"{source}: attention_bias and mlp_bias differ; bert_jax has one "
                          "use_bias for every dense layer")
    out["use_bias"] = bool(values.get("mlp_bias", False))
    kv = values.get("num_key_value_heads")
    out["num_key_value_heads"] = None if kv in (None, out["num_attention_heads"]) else kv
    head_dim = values.get("head_dim")
    if head_dim not in (None, out["hidden_size"] // out["num_attention_heads"]):
        raise ConfigError(f"{source}: head_dim {head_dim} is not hidden_size / "
                          "num_attention_heads, the only head size bert_jax has")
    if values.get("tie_word_embeddings", False):
        raise ConfigError(f"{source}: tie_word_embeddings is true; bert_jax reads EuroBERT's "
                          "own untied lm_head only")
    rope = values.get("rope_parameters") or values.get("rope_scaling") or {}
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        raise ConfigError(f"{source}: rope scaling {rope.get('rope_type', rope.get('type'))!r} "
                          "is not supported (default rotary only)")
    out["rope_theta"] = float(rope.get("rope_theta", values.get("rope_theta", 10000.0)))
    return out


def _eurobert_to_hf(c: BertConfig) -> dict[str, Any]:
    """Our config as transformers' EuroBertConfig (EuroBertForMaskedLM)."""
    out = {"architectures": ["EuroBertForMaskedLM"], "model_type": "eurobert"}
    out.update({hf: getattr(c, name) for hf, (name, _, _) in _EUROBERT_FIELDS.items()})
    big = c.vocab_size > max(_EUROBERT_IDS.values())  # EuroBERT's special tokens fit
    out.update(num_key_value_heads=c.kv_heads, head_dim=c.head_dim, attention_bias=c.use_bias,
               mlp_bias=c.use_bias, tie_word_embeddings=False,
               rope_parameters={"rope_type": "default", "rope_theta": c.rope_theta},
               torch_dtype="float32",
               **(_EUROBERT_IDS if big else {"bos_token_id": None, "eos_token_id": None,
                                             "pad_token_id": None}))
    return out


# --- ELECTRA ------------------------------------------------------------------------

# ElectraConfig's fields (ours by the same names) and its defaults (ELECTRA-Small's).
_ELECTRA_FIELDS = {name: (name, kind, default) for name, kind, default in (
    ("vocab_size", int, 30522), ("embedding_size", int, 128), ("hidden_size", int, 256),
    ("num_hidden_layers", int, 12), ("num_attention_heads", int, 4),
    ("intermediate_size", int, 1024), ("hidden_act", str, "gelu"),
    ("hidden_dropout_prob", float, 0.1), ("attention_probs_dropout_prob", float, 0.1),
    ("max_position_embeddings", int, 512), ("type_vocab_size", int, 2),
    ("initializer_range", float, 0.02), ("layer_norm_eps", float, 1e-12))}


def _electra_from_hf(values: dict[str, Any], source: str) -> dict[str, Any]:
    """transformers' ElectraConfig as our fields.

    BERT's fields plus `embedding_size`, factorized (an `embeddings_project` to hidden_size) only
    where it differs from hidden_size."""
    position_type = values.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise ConfigError(f"{source}: position_embedding_type {position_type!r} is not "
                          "supported (ELECTRA uses learned absolute positions)")
    out = {"model_type": "electra", "pooler_act": "gelu",  # its classification head's
           **_renamed_fields(values, _ELECTRA_FIELDS, source)}
    if out["embedding_size"] == out["hidden_size"]:
        out["embedding_size"] = None
    return out


def _electra_to_hf(c: BertConfig) -> dict[str, Any]:
    """Our config as transformers' ElectraConfig (ElectraForPreTraining)."""
    out = {"architectures": ["ElectraForPreTraining"], "model_type": "electra"}
    out.update({hf: getattr(c, name) for hf, (name, _, _) in _ELECTRA_FIELDS.items()})
    out.update(embedding_size=c.embedding_width, position_embedding_type="absolute",
               pad_token_id=0, torch_dtype="float32")
    return out


# --- RoBERTa, XLM-R, CamemBERT ----------------------------------------------------------

# Their classes' names in transformers, per model_type.
ROBERTA_CLASSES = {"roberta": "Roberta", "xlm-roberta": "XLMRoberta", "camembert": "Camembert"}


def _roberta_from_hf(values: dict[str, Any], source: str) -> dict[str, Any]:
    """transformers' RobertaConfig (and XLM-R's, CamemBERT's) as our fields.

    BERT's fields; positions counted after the padding id (`pad_token_id` 1: position i reads row i
    + 2)."""
    pad = values.get("pad_token_id", 1)
    if not isinstance(pad, int) or isinstance(pad, bool) or pad < 0:
        raise ConfigError(f"{source}: pad_token_id should be a non-negative int, got {pad!r}")
    return {**_bert_from_hf(values, source), "model_type": values["model_type"],
            "position_offset": pad + 1}


def _roberta_to_hf(c: BertConfig) -> dict[str, Any]:
    out = _bert_to_hf(c)
    out.update(architectures=[f"{ROBERTA_CLASSES[c.model_type]}ForMaskedLM"],
               pad_token_id=c.position_offset - 1, bos_token_id=0, eos_token_id=2)
    return out


# --- DistilBERT ----------------------------------------------------------------------

# DistilBertConfig's fields that are ours under other names, and its defaults.
_DISTILBERT_FIELDS = {"vocab_size": ("vocab_size", int, 30522),
                      "dim": ("hidden_size", int, 768),
                      "n_layers": ("num_hidden_layers", int, 6),
                      "n_heads": ("num_attention_heads", int, 12),
                      "hidden_dim": ("intermediate_size", int, 3072),
                      "activation": ("hidden_act", str, "gelu"),
                      "dropout": ("hidden_dropout_prob", float, 0.1),
                      "attention_dropout": ("attention_probs_dropout_prob", float, 0.1),
                      "max_position_embeddings": ("max_position_embeddings", int, 512),
                      "initializer_range": ("initializer_range", float, 0.02)}


def _distilbert_from_hf(values: dict[str, Any], source: str) -> dict[str, Any]:
    """transformers' DistilBertConfig as our fields.

    BERT's encoder without token types or pooler (its sequence classifier's `pre_classifier` + ReLU
    is our pooler with relu). Sinusoidal positions are stored in the position table, so they load as
    a learned one."""
    return {"model_type": "distilbert", "type_vocab_size": 0, "layer_norm_eps": 1e-12,
            "pooler_act": "relu", **_renamed_fields(values, _DISTILBERT_FIELDS, source)}


def _distilbert_to_hf(c: BertConfig) -> dict[str, Any]:
    out = {"architectures": ["DistilBertForMaskedLM"], "model_type": "distilbert"}
    out.update({hf: getattr(c, name) for hf, (name, _, _) in _DISTILBERT_FIELDS.items()})
    out.update(sinusoidal_pos_embds=False, qa_dropout=c.hidden_dropout_prob,
               seq_classif_dropout=c.hidden_dropout_prob, pad_token_id=0, tie_weights_=True,
               torch_dtype="float32")
    return out


def _renamed_fields(values, fields, source):
    """{our name: value} of the `fields` ({hf name: (our name, type, default)})."""
    out = {}
    for hf_name, (name, kind, default) in fields.items():
        value = values.get(hf_name, default)
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise ConfigError(f"{source}: field {hf_name!r} should be {kind.__name__}, "
                              f"got {value!r}")
        out[name] = value
    return out


# Per model_type of config.json: (its fields as BertConfig's, a BertConfig as it).
_HF_FAMILIES: dict[str, tuple[Callable[[dict[str, Any], str], dict[str, Any]],
                              Callable[[BertConfig], dict[str, Any]]]] = {
    "bert": (_bert_from_hf, _bert_to_hf),
    "albert": (_albert_from_hf, _albert_to_hf),
    "modernbert": (_modernbert_from_hf, _modernbert_to_hf),
    "eurobert": (_eurobert_from_hf, _eurobert_to_hf),
    "electra": (_electra_from_hf, _electra_to_hf),
    **{name: (_roberta_from_hf, _roberta_to_hf) for name in ROBERTA_CLASSES},
    "distilbert": (_distilbert_from_hf, _distilbert_to_hf),
}
