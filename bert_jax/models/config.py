"""BERT model configuration: presets, Google `bert_config.json` and HF `config.json`.

A `BertConfig` holds everything the original `bert_config.json` has, plus the
knobs that change how (not what) the model computes: compute and parameter
dtypes, rematerialisation, scanned layers and the attention implementation.
`model_type="albert"` describes ALBERT (Lan et al., 2019) with the same fields plus
its factorized embeddings (`embedding_size`) and cross-layer sharing
(`num_hidden_groups`, `inner_group_num`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Any

from bert_jax.errors import UserError

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
ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "tanh", "silu", "swish")
REMAT_POLICIES = ("none", "full", "dots", "dots_with_no_batch_dims")
DTYPES = ("float32", "bfloat16", "float16")
# A run's `compute_dtype`: a dtype, or "fp8" (bfloat16 with FP8 encoder matmuls).
COMPUTE_DTYPES = (*DTYPES, "fp8")
# "einsum": BERT's attention exactly (probabilities materialised, dropout on them);
# "fused": jax.nn.dot_product_attention (cuDNN flash attention on GPU in bf16/fp16),
# which has no attention-probability dropout. See docs/performance.md.
ATTENTION_IMPLS = ("einsum", "fused")
# "modernbert": a BERT encoder with the modern options, named as transformers' ModernBert*
# (its config.json and tensor names); the model code reads only the options.
MODEL_TYPES = ("bert", "albert", "modernbert")
# How positions enter: BERT's learned table added to the embeddings, or rotary angles on
# the queries and keys (RoFormer; ModernBERT), with no position table.
POSITION_TYPES = ("absolute", "rotary")
# ALBERT's fields of HF's config.json, with transformers' AlbertConfig defaults.
_ALBERT_FIELDS = {"embedding_size": 128, "num_hidden_groups": 1, "inner_group_num": 1}


class ConfigError(UserError):
    """A configuration file or value that cannot describe a BERT model."""


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """Architecture and numerics of a BERT encoder.

    The defaults are BERT-base (uncased). `dtype` is the compute dtype,
    `param_dtype` the storage dtype of parameters (keep float32 for training).
    `attention_impl`: one of ATTENTION_IMPLS; "fused" trains only with
    `attention_probs_dropout_prob=0` (see `check_trainable`). `fp8`: the encoder layers'
    six matmuls in float8 with current per-tensor scaling (bert_jax/models/fp8.py), the rest in
    `dtype`; the parameters are the same, so checkpoints move between FP8 and bf16 runs.

    ALBERT (`model_type="albert"`): token embeddings of width `embedding_size` (E),
    projected to `hidden_size`; the layers are `num_hidden_groups` groups of
    `inner_group_num` layers, group g applied num_hidden_layers / num_hidden_groups
    times in a row, so one group's parameters serve many layers (all of them in the
    published models: one group of one layer). BERT leaves these fields at None/1.

    The ModernBERT-class options (Warner et al., 2024; the `modernbert-*` presets), each
    off by default: `position_embedding_type="rotary"` (no position table; bases
    `rope_theta` on global layers and `local_rope_theta` on local ones); `type_vocab_size=0`
    (no token types); `pre_norm` (LayerNorm before attention and before the MLP, none
    before the first layer's attention, as ModernBERT) and `final_norm` (a LayerNorm on the
    last layer's output); `gated_mlp` (GeGLU with `hidden_act="gelu"`: act(x W_in) * x W_gate);
    `use_bias`/`norm_bias` (biases of the dense layers / of the LayerNorms);
    `local_attention` > 0: a sliding window of that many tokens (half on each side) on
    the layers whose index is not a multiple of `global_attn_every_n_layers`.
    """

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    dtype: str = "float32"
    param_dtype: str = "float32"
    remat_policy: str = "none"
    scan_layers: bool = False
    attention_impl: str = "einsum"
    fp8: bool = False
    model_type: str = "bert"
    embedding_size: int | None = None
    num_hidden_groups: int = 1
    inner_group_num: int = 1
    position_embedding_type: str = "absolute"
    rope_theta: float = 160000.0
    local_rope_theta: float = 10000.0
    pre_norm: bool = False
    final_norm: bool = False
    gated_mlp: bool = False
    use_bias: bool = True
    norm_bias: bool = True
    local_attention: int = 0
    global_attn_every_n_layers: int = 1

    def __post_init__(self):
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "intermediate_size", "max_position_embeddings",
                     "global_attn_every_n_layers"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"hidden_size ({self.hidden_size}) is not a multiple of "
                f"num_attention_heads ({self.num_attention_heads})")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(f"{name} must be in [0, 1), got {getattr(self, name)!r}")
        check_choice("hidden_act", self.hidden_act, ACTIVATIONS)
        check_choice("remat_policy", self.remat_policy, REMAT_POLICIES)
        check_choice("dtype", self.dtype, DTYPES)
        check_choice("param_dtype", self.param_dtype, DTYPES)
        check_choice("attention_impl", self.attention_impl, ATTENTION_IMPLS)
        check_choice("model_type", self.model_type, MODEL_TYPES)
        check_choice("position_embedding_type", self.position_embedding_type, POSITION_TYPES)
        for name in ("type_vocab_size", "local_attention"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"{name} must be a non-negative integer, got {value!r}")
        if self.local_attention % 2:
            raise ConfigError(f"local_attention ({self.local_attention}) must be even: half "
                              "of the window on each side of a token")
        if self.rotary and self.head_dim % 2:
            raise ConfigError(f"rotary positions need an even head size, got {self.head_dim}")
        self._check_albert_fields()

    def _check_albert_fields(self):
        names = ("embedding_size", "num_hidden_groups", "inner_group_num")
        if self.model_type != "albert":
            if (self.embedding_size, self.num_hidden_groups, self.inner_group_num) != (None, 1, 1):
                raise ConfigError(f"{', '.join(names)} are ALBERT's: set model_type='albert' "
                                  "to use them")
            return
        if self.rotary or self.pre_norm or self.local_attention:
            raise ConfigError("rotary positions, pre_norm and local_attention are not "
                              "options of ALBERT's shared layers")
        for name in names:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"{name} must be a positive integer for ALBERT, got {value!r}")
        if self.num_hidden_layers % self.num_hidden_groups:
            raise ConfigError(f"num_hidden_layers ({self.num_hidden_layers}) is not a multiple "
                              f"of num_hidden_groups ({self.num_hidden_groups})")

    def check_trainable(self) -> None:
        """Raises ConfigError when this config cannot run with dropout on (training)."""
        if self.attention_impl == "fused" and self.attention_probs_dropout_prob > 0:
            raise ConfigError(
                "attention_impl='fused' has no attention-probability dropout, but "
                f"attention_probs_dropout_prob={self.attention_probs_dropout_prob}: set "
                "attention_probs_dropout_prob=0 to train with fused attention, or "
                "attention_impl='einsum' for BERT's exact dropout")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def rotary(self) -> bool:
        return self.position_embedding_type == "rotary"

    def is_local_layer(self, index: int) -> bool:
        """Whether layer `index` attends through the sliding window (ModernBERT's pattern:
        global on multiples of global_attn_every_n_layers)."""
        return self.local_attention > 0 and index % self.global_attn_every_n_layers != 0

    @property
    def embedding_width(self) -> int:
        """The width of the token embeddings: ALBERT's `embedding_size`, else hidden_size."""
        return self.embedding_size or self.hidden_size

    @property
    def depth(self) -> int:
        """Transformer layers applied, each giving a hidden state: num_hidden_layers,
        times inner_group_num for ALBERT."""
        return self.num_hidden_layers * self.inner_group_num

    def replace(self, **changes) -> "BertConfig":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "BertConfig":
        """Builds a config from a dict of our own field names; unknown keys are errors."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"unknown BertConfig field(s): {', '.join(unknown)}")
        return cls(**values)

    # --- Google bert_config.json -------------------------------------------------
    def to_google_dict(self) -> dict[str, Any]:
        albert = _ALBERT_FIELDS if self.model_type == "albert" else {}
        return {name: getattr(self, name) for name in (*_GOOGLE_FIELDS, *albert)}

    @classmethod
    def from_google_dict(cls, values: dict[str, Any], source: str = "bert_config.json"):
        return cls(**_read_fields(values, _GOOGLE_FIELDS, source,
                                  optional={"layer_norm_eps": float}))

    # --- Hugging Face config.json ----------------------------------------------------
    def to_hf_dict(self) -> dict[str, Any]:
        if self.model_type == "modernbert":
            return _modernbert_to_hf(self)
        albert = self.model_type == "albert"
        return {
            "architectures": ["AlbertForPreTraining" if albert else "BertForPreTraining"],
            "model_type": self.model_type,
            **self.to_google_dict(),
            # transformers' ALBERT drops out before its classifiers at this rate.
            **({"classifier_dropout_prob": self.hidden_dropout_prob} if albert else {}),
            "layer_norm_eps": self.layer_norm_eps,
            "pad_token_id": 0,
            "position_embedding_type": "absolute",
            "torch_dtype": "float32",
        }

    @classmethod
    def from_hf_dict(cls, values: dict[str, Any], source: str = "config.json"):
        model_type = values.get("model_type", "bert")
        if model_type == "modernbert":
            return cls(**_modernbert_from_hf(values, source))
        if model_type not in MODEL_TYPES:
            raise ConfigError(f"{source}: model_type is {model_type!r}, expected one of "
                              f"{', '.join(MODEL_TYPES)}")
        position_type = values.get("position_embedding_type", "absolute")
        if position_type != "absolute":
            raise ConfigError(f"{source}: position_embedding_type {position_type!r} is not "
                              "supported (BERT uses learned absolute positions)")
        fields = _read_fields(values, _GOOGLE_FIELDS, source, optional={"layer_norm_eps": float})
        if model_type == "albert":
            fields.update(_ALBERT_FIELDS)
            fields.update(_read_fields(values, {}, source,
                                       optional={name: int for name in _ALBERT_FIELDS}))
        return cls(model_type=model_type, **fields)

    @classmethod
    def from_json_file(cls, path: str | os.PathLike) -> "BertConfig":
        """Reads Google's `bert_config.json`, HF's `config.json` or our own saved config."""
        try:
            with open(path, encoding="utf-8") as f:
                values = json.load(f)
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path}") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ConfigError(f"{path} is not valid JSON: {e}") from None
        if not isinstance(values, dict):
            raise ConfigError(f"{path}: expected a JSON object, got {type(values).__name__}")
        if set(values) <= {f.name for f in dataclasses.fields(cls)} and "dtype" in values:
            return cls.from_dict(values)
        if "model_type" in values or "architectures" in values:
            return cls.from_hf_dict(values, source=str(path))
        return cls.from_google_dict(values, source=str(path))

    def save(self, path: str | os.PathLike) -> None:
        """Writes our full config (a superset of Google's bert_config.json)."""
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_dict(), f, indent=2, sort_keys=True)
            f.write("\n")


def check_inputs_fit(config: BertConfig, source: str, *, max_seq_length: int | None = None,
                     vocab_size: int | None = None) -> None:
    """Raises ConfigError when inputs would index past the model's tables, which gives
    NaN instead of an error: `max_seq_length` positions, a tokenizer of `vocab_size`
    ids. `source` names the model (a path or preset)."""
    if max_seq_length is not None and max_seq_length > config.max_position_embeddings:
        raise ConfigError(f"max_seq_length {max_seq_length} exceeds the max_position_embeddings "
                          f"{config.max_position_embeddings} of {source}")
    if vocab_size is not None and vocab_size > config.vocab_size:
        raise ConfigError(f"the tokenizer has {vocab_size} tokens but {source} has "
                          f"vocab_size={config.vocab_size}: ids past it would read no embedding")


def compute_fields(compute_dtype: str) -> dict[str, Any]:
    """A run's `compute_dtype` as BertConfig fields: "fp8" is bfloat16 compute with the
    encoder's matmuls in float8 (`BertConfig.fp8`)."""
    check_choice("compute_dtype", compute_dtype, COMPUTE_DTYPES)
    if compute_dtype == "fp8":
        return {"dtype": "bfloat16", "fp8": True}
    return {"dtype": compute_dtype, "fp8": False}


# The run-config keys that set BertConfig fields of the same name where a run sets them.
_RUN_FIELDS = ("remat_policy", "attention_impl", "scan_layers")
_RUN_DROPOUTS = ("hidden_dropout_prob", "attention_probs_dropout_prob")


def run_bert_config(run: Any, base: BertConfig | str | Any, vocab_size: int | None = None,
                    **fixed) -> BertConfig:
    """The BertConfig a job runs, the one place where a run's numerics and dropout meet
    the model: `base` (a checkpoint's BertConfig, or a spec for `from_model_spec` with the
    tokenizer's `vocab_size`) with each of the run's compute_dtype (`compute_fields`),
    remat_policy, attention_impl, scan_layers and dropout probabilities that `run` (a
    job's config, read with `.get`) sets: absent, None or '' keep the base's. Parameters
    are float32 (training updates them). `fixed`: fields that win over the run's (a
    teacher's eval mode). Raises ConfigError when the result cannot train."""
    changes = {"param_dtype": "float32"}
    if run.get("compute_dtype"):
        changes.update(compute_fields(run.get("compute_dtype")))
    for key in _RUN_FIELDS + _RUN_DROPOUTS:
        value = run.get(key)
        if value is not None and value != "":
            changes[key] = float(value) if key in _RUN_DROPOUTS else value
    changes.update(fixed)
    config = (base.replace(**changes) if isinstance(base, BertConfig)
              else from_model_spec(base, vocab_size, **changes))
    config.check_trainable()
    return config


def check_choice(name, value, choices):
    if value not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(choices)}; got {value!r}")


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
    """transformers' ModernBertConfig (config.json) as our fields. Refuses what the model
    cannot express: biases on some dense layers only, an untied or bias-less decoder, a
    layer pattern other than a global layer every n, rope scaling."""
    out = {"model_type": "modernbert", "type_vocab_size": 0, "position_embedding_type": "rotary",
           "pre_norm": True, "final_norm": True, "gated_mlp": True}
    for hf_name, (name, kind, default) in _MODERNBERT_FIELDS.items():
        value = values.get(hf_name, default)
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise ConfigError(f"{source}: field {hf_name!r} should be {kind.__name__}, "
                              f"got {value!r}")
        out[name] = value
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


def _small_bert(layers: int, hidden: int) -> BertConfig:
    return BertConfig(num_hidden_layers=layers, hidden_size=hidden,
                      num_attention_heads=hidden // 64, intermediate_size=4 * hidden)


def _albert(layers: int, hidden: int, heads: int, vocab: int, **fields) -> BertConfig:
    return BertConfig(model_type="albert", embedding_size=128, num_hidden_layers=layers,
                      hidden_size=hidden, num_attention_heads=heads,
                      intermediate_size=4 * hidden, vocab_size=vocab, hidden_dropout_prob=0.0,
                      attention_probs_dropout_prob=0.0, **fields)


def _modernbert(layers: int, hidden: int, heads: int, intermediate: int,
                **fields) -> BertConfig:
    """ModernBERT (answerdotai/ModernBERT-base, -large): rotary positions, pre-norm with a
    final norm, GeGLU, no biases but the decoder's, a 128-token window with a global layer
    every third, 8192 positions, OLMo's 50368-token vocabulary, no dropout."""
    values = dict(
        model_type="modernbert", vocab_size=50368, hidden_size=hidden, num_hidden_layers=layers,
        num_attention_heads=heads, intermediate_size=intermediate, hidden_act="gelu",
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        max_position_embeddings=8192, type_vocab_size=0, layer_norm_eps=1e-5,
        position_embedding_type="rotary", rope_theta=160000.0, local_rope_theta=10000.0,
        pre_norm=True, final_norm=True, gated_mlp=True, use_bias=False, norm_bias=False,
        local_attention=128, global_attn_every_n_layers=3)
    return BertConfig(**{**values, **fields})


PRESETS: dict[str, BertConfig] = {
    "bert-base": BertConfig(),
    "bert-large": BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                             intermediate_size=4096),
    # The 24 small BERTs of Turc et al. (2019), e.g. bert-L4-H256 ("BERT-Mini").
    **{f"bert-L{n}-H{h}": _small_bert(n, h)
       for n in (2, 4, 6, 8, 10, 12) for h in (128, 256, 512, 768)},
    # Google's released multilingual and Chinese BERT-Base: BERT-Base with their vocabularies.
    "bert-base-chinese": BertConfig(vocab_size=21128),
    "bert-base-multilingual-cased": BertConfig(vocab_size=119547),
    "bert-base-multilingual-uncased": BertConfig(vocab_size=105879),
    # For tests and the demo: seconds per step on a CPU.
    "tiny": BertConfig(vocab_size=8192, hidden_size=128, num_hidden_layers=2,
                       num_attention_heads=2, intermediate_size=512,
                       max_position_embeddings=512),
    # ALBERT v2 as Google released it (and transformers' albert-base-v2, albert-large-v2):
    # E=128, one shared layer, SentencePiece vocabulary of 30000, no dropout.
    "albert-base-v2": _albert(12, 768, 12, 30000, hidden_act="gelu_new"),
    "albert-large-v2": _albert(24, 1024, 16, 30000, hidden_act="gelu_new"),
    # brightmart/albert_zh's Chinese ALBERTs, on BERT's Chinese vocabulary (21128);
    # albert_tiny_zh is 4 layers of width 312.
    "albert-tiny-zh": _albert(4, 312, 12, 21128),
    "albert-base-zh": _albert(12, 768, 12, 21128),
    "modernbert-base": _modernbert(22, 768, 12, 1152),
    "modernbert-large": _modernbert(28, 1024, 16, 2624),
    # The modern options at the size of "tiny" (seconds per step on a CPU), with a 64-token
    # window so that local layers matter at short lengths.
    "modernbert-tiny": _modernbert(3, 128, 2, 256, vocab_size=8192, max_position_embeddings=1024,
                                   local_attention=64),
}


def preset(name: str, **overrides) -> BertConfig:
    """A named preset with field overrides, e.g. `preset('tiny', vocab_size=100)`."""
    if name not in PRESETS:
        close = [p for p in PRESETS if re.sub(r"\d", "", p) == re.sub(r"\d", "", name)]
        hint = f" Did you mean one of: {', '.join(close[:6])}?" if close else ""
        raise ConfigError(f"unknown model preset {name!r}. Known: "
                          f"bert-base, bert-large, bert-base-chinese, "
                          f"bert-base-multilingual-{{cased,uncased}}, "
                          f"bert-L{{2,4,6,8,10,12}}-H{{128,256,512,768}}, "
                          f"albert-{{base,large}}-v2, "
                          f"albert-{{tiny,base}}-zh, modernbert-{{base,large,tiny}}, tiny.{hint}")
    return PRESETS[name].replace(**overrides)


def from_model_spec(spec: str | Any, vocab_size: int | None = None,
                    **overrides) -> BertConfig:
    """A preset name, or a dict of BertConfig fields with an optional 'preset' (default
    bert-base). `vocab_size` (the tokenizer's) applies unless the dict sets one;
    `overrides` win over both."""
    fields = {"preset": spec} if isinstance(spec, str) else dict(spec)
    name = fields.pop("preset", "bert-base")
    if vocab_size is not None:
        fields.setdefault("vocab_size", vocab_size)
    return preset(name, **{**fields, **overrides})
