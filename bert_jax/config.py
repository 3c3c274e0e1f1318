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
MODEL_TYPES = ("bert", "albert")
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
    six matmuls in float8 with current per-tensor scaling (bert_jax/fp8.py), the rest in
    `dtype`; the parameters are the same, so checkpoints move between FP8 and bf16 runs.

    ALBERT (`model_type="albert"`): token embeddings of width `embedding_size` (E),
    projected to `hidden_size`; the layers are `num_hidden_groups` groups of
    `inner_group_num` layers, group g applied num_hidden_layers / num_hidden_groups
    times in a row, so one group's parameters serve many layers (all of them in the
    published models: one group of one layer). BERT leaves these fields at None/1.
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

    def __post_init__(self):
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "intermediate_size", "max_position_embeddings", "type_vocab_size"):
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
        self._check_albert_fields()

    def _check_albert_fields(self):
        names = ("embedding_size", "num_hidden_groups", "inner_group_num")
        if self.model_type == "bert":
            if (self.embedding_size, self.num_hidden_groups, self.inner_group_num) != (None, 1, 1):
                raise ConfigError(f"{', '.join(names)} are ALBERT's: set model_type='albert' "
                                  "to use them")
            return
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


def _small_bert(layers: int, hidden: int) -> BertConfig:
    return BertConfig(num_hidden_layers=layers, hidden_size=hidden,
                      num_attention_heads=hidden // 64, intermediate_size=4 * hidden)


def _albert(layers: int, hidden: int, heads: int, vocab: int, **fields) -> BertConfig:
    return BertConfig(model_type="albert", embedding_size=128, num_hidden_layers=layers,
                      hidden_size=hidden, num_attention_heads=heads,
                      intermediate_size=4 * hidden, vocab_size=vocab, hidden_dropout_prob=0.0,
                      attention_probs_dropout_prob=0.0, **fields)


PRESETS: dict[str, BertConfig] = {
    "bert-base": BertConfig(),
    "bert-large": BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                             intermediate_size=4096),
    # The 24 small BERTs of Turc et al. (2019), e.g. bert-L4-H256 ("BERT-Mini").
    **{f"bert-L{l}-H{h}": _small_bert(l, h)
       for l in (2, 4, 6, 8, 10, 12) for h in (128, 256, 512, 768)},
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
}


def preset(name: str, **overrides) -> BertConfig:
    """A named preset with field overrides, e.g. `preset('tiny', vocab_size=100)`."""
    if name not in PRESETS:
        close = [p for p in PRESETS if re.sub(r"\d", "", p) == re.sub(r"\d", "", name)]
        hint = f" Did you mean one of: {', '.join(close[:6])}?" if close else ""
        raise ConfigError(f"unknown model preset {name!r}. Known: "
                          f"bert-base, bert-large, bert-base-chinese, "
                          f"bert-base-multilingual-{{cased,uncased}}, "
                          f"bert-L{{2,4,6,8,10,12}}-H{{128,256,512,768}}, albert-{{base,large}}-v2, "
                          f"albert-{{tiny,base}}-zh, tiny.{hint}")
    return PRESETS[name].replace(**overrides)
