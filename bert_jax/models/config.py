"""The model configuration (`BertConfig`) and its validation.

A `BertConfig` holds everything the original `bert_config.json` has, plus the
knobs that change how (not what) the model computes: compute and parameter
dtypes, rematerialisation, scanned layers and the attention implementation.
`model_type="albert"` describes ALBERT (Lan et al., 2019) with the same fields plus
its factorized embeddings (`embedding_size`) and cross-layer sharing
(`num_hidden_groups`, `inner_group_num`).

Elsewhere: the named configs in `bert_jax.models.presets`; Google's `bert_config.json`
and HF's `config.json` in `bert_jax.weights.config_json`; a run's numerics and dropout
applied to a config in `bert_jax.train.model_config`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from bert_jax.errors import UserError

ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "tanh", "silu", "swish")
REMAT_POLICIES = ("none", "full", "dots", "dots_with_no_batch_dims")
DTYPES = ("float32", "bfloat16", "float16")
# "einsum": BERT's attention exactly (probabilities materialised, dropout on them);
# "fused": jax.nn.dot_product_attention (cuDNN flash attention on GPU in bf16/fp16),
# which has no attention-probability dropout. See docs/performance.md.
ATTENTION_IMPLS = ("einsum", "fused")
# "modernbert": a BERT encoder with the modern options, named as transformers' ModernBert*
# (its config.json and tensor names); the model code reads only the options.
# RoBERTa's family ("roberta", "xlm-roberta", "camembert": one architecture under three
# names, kept for the way back to transformers) is BERT with `position_offset=2`;
# DistilBERT is BERT without token types.
MODEL_TYPES = ("bert", "albert", "modernbert", "eurobert", "electra", "roberta", "xlm-roberta",
               "camembert", "distilbert")
ROBERTA_TYPES = ("roberta", "xlm-roberta", "camembert")
# How positions enter: BERT's learned table added to the embeddings, or rotary angles on
# the queries and keys (RoFormer; ModernBERT), with no position table.
POSITION_TYPES = ("absolute", "rotary")
# LayerNorm (BERT, ModernBERT) or RMSNorm (Zhang & Sennrich, 2019; EuroBERT: no centring,
# no bias).
NORM_TYPES = ("layer_norm", "rms_norm")


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
    ELECTRA (`model_type="electra"`, Clark et al., 2020) is BERT with ALBERT's factorized
    embeddings when `embedding_size` is set (its small models), without shared layers.

    The ModernBERT-class options (Warner et al., 2024; the `modernbert-*` presets), each
    off by default: `position_embedding_type="rotary"` (no position table; bases
    `rope_theta` on global layers and `local_rope_theta` on local ones); `type_vocab_size=0`
    (no token types); `pre_norm` (LayerNorm before attention and before the MLP, none
    before the first layer's attention, as ModernBERT) and `final_norm` (a LayerNorm on the
    last layer's output); `gated_mlp` (GeGLU with `hidden_act="gelu"`: act(x W_in) * x W_gate);
    `use_bias`/`norm_bias` (biases of the dense layers / of the LayerNorms);
    `local_attention` > 0: a sliding window of that many tokens (half on each side) on
    the layers whose index is not a multiple of `global_attn_every_n_layers`.

    The Llama-style options (EuroBERT, Boizard et al., 2025): `norm_type="rms_norm"`;
    `num_key_value_heads` < heads: grouped-query attention, query head i reading key/value
    head i // (heads / kv heads) (None: one per query head); `embedding_norm=False`: no
    norm on the embeddings, so pre-norm layers normalise before the first attention too;
    `mlm_transform=False`: the MLM head is one linear decoder of its own (untied, biased
    as `use_bias`), without BERT's dense + norm transform.

    RoBERTa (Liu et al., 2019), XLM-R and CamemBERT: `position_offset=2`, position i of a
    row reads row i + 2 of the position table (fairseq counts positions after the padding
    id 1), so max_position_embeddings 514 serves 512 tokens (`max_positions`).
    `pooler_act`: the pooler's activation: BERT's tanh; relu for DistilBERT's
    `pre_classifier`, gelu for ELECTRA's classification head (each family's sequence
    classifier is a dense + activation on the first token, then the classifier).
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
    norm_type: str = "layer_norm"
    num_key_value_heads: int | None = None
    embedding_norm: bool = True
    mlm_transform: bool = True
    position_offset: int = 0
    pooler_act: str = "tanh"

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
        check_choice("pooler_act", self.pooler_act, ACTIVATIONS)
        check_choice("remat_policy", self.remat_policy, REMAT_POLICIES)
        check_choice("dtype", self.dtype, DTYPES)
        check_choice("param_dtype", self.param_dtype, DTYPES)
        check_choice("attention_impl", self.attention_impl, ATTENTION_IMPLS)
        check_choice("model_type", self.model_type, MODEL_TYPES)
        check_choice("position_embedding_type", self.position_embedding_type, POSITION_TYPES)
        check_choice("norm_type", self.norm_type, NORM_TYPES)
        kv = self.num_key_value_heads
        if kv is not None and (not isinstance(kv, int) or isinstance(kv, bool) or kv <= 0
                               or self.num_attention_heads % kv):
            raise ConfigError(f"num_key_value_heads must be a positive divisor of "
                              f"num_attention_heads ({self.num_attention_heads}), got {kv!r}")
        for name in ("type_vocab_size", "local_attention", "position_offset"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"{name} must be a non-negative integer, got {value!r}")
        if self.local_attention % 2:
            raise ConfigError(f"local_attention ({self.local_attention}) must be even: half "
                              "of the window on each side of a token")
        if self.position_offset >= self.max_position_embeddings:
            raise ConfigError(f"position_offset ({self.position_offset}) leaves no position of "
                              f"the {self.max_position_embeddings} in the table")
        if self.rotary and self.head_dim % 2:
            raise ConfigError(f"rotary positions need an even head size, got {self.head_dim}")
        self._check_albert_fields()

    def _check_albert_fields(self):
        names = ("embedding_size", "num_hidden_groups", "inner_group_num")
        if self.model_type == "electra":  # factorized embeddings (optional), no sharing
            names = names[1:]
            if self.embedding_size is not None:
                self._check_positive("embedding_size", "ELECTRA")
        if self.model_type != "albert":
            values = tuple(getattr(self, name) for name in names)
            if values != (None, 1, 1)[-len(names):]:
                raise ConfigError(f"{', '.join(names)} are ALBERT's: set model_type='albert' "
                                  "to use them")
            return
        if self.rotary or self.pre_norm or self.local_attention:
            raise ConfigError("rotary positions, pre_norm and local_attention are not "
                              "options of ALBERT's shared layers")
        for name in names:
            self._check_positive(name, "ALBERT")
        if self.num_hidden_layers % self.num_hidden_groups:
            raise ConfigError(f"num_hidden_layers ({self.num_hidden_layers}) is not a multiple "
                              f"of num_hidden_groups ({self.num_hidden_groups})")

    def _check_positive(self, name: str, family: str):
        value = getattr(self, name)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ConfigError(f"{name} must be a positive integer for {family}, got {value!r}")

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
    def kv_heads(self) -> int:
        """Key/value heads: num_key_value_heads, else one per query head."""
        return self.num_key_value_heads or self.num_attention_heads

    @property
    def max_positions(self) -> int:
        """The longest row the position table serves.

        max_position_embeddings less the rows before position 0 (`position_offset`)."""
        return self.max_position_embeddings - self.position_offset

    @property
    def rotary(self) -> bool:
        return self.position_embedding_type == "rotary"

    def is_local_layer(self, index: int) -> bool:
        """Whether layer `index` attends through the sliding window.

        ModernBERT's pattern: global on multiples of global_attn_every_n_layers."""
        return self.local_attention > 0 and index % self.global_attn_every_n_layers != 0

    @property
    def embedding_width(self) -> int:
        """The token embeddings' width: `embedding_size` (ALBERT, ELECTRA), else hidden_size."""
        return self.embedding_size or self.hidden_size

    @property
    def factorized_embeddings(self) -> bool:
        """Whether the token embeddings have a width of their own (`embedding_size`).

        They are projected to hidden_size after their LayerNorm (ALBERT)."""
        return self.embedding_size is not None

    @property
    def shares_layers(self) -> bool:
        """Whether the layers are groups applied several times with one set of parameters.

        ALBERT's `num_hidden_groups` of `inner_group_num` layers."""
        return self.model_type == "albert"

    @property
    def depth(self) -> int:
        """Transformer layers applied, each giving a hidden state.

        num_hidden_layers, times inner_group_num for ALBERT."""
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


def check_inputs_fit(config: BertConfig, source: str, *, max_seq_length: int | None = None,
                     vocab_size: int | None = None) -> None:
    """Raises ConfigError when inputs would index past the model's tables.

    That gives NaN instead of an error: `max_seq_length` positions, a tokenizer of `vocab_size` ids.
    `source` names the model (a path or preset)."""
    if max_seq_length is not None and max_seq_length > config.max_positions:
        offset = (f" less position_offset {config.position_offset}"
                  if config.position_offset else "")
        raise ConfigError(f"max_seq_length {max_seq_length} exceeds the max_position_embeddings "
                          f"{config.max_position_embeddings}{offset} of {source}")
    if vocab_size is not None and vocab_size > config.vocab_size:
        raise ConfigError(f"the tokenizer has {vocab_size} tokens but {source} has "
                          f"vocab_size={config.vocab_size}: ids past it would read no embedding")


def check_choice(name, value, choices):
    if value not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(choices)}; got {value!r}")
