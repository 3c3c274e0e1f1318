"""The named model configs.

BERT-base and -large, the 24 small BERTs, Google's Chinese and multilingual BERT-Base, ALBERT v2 and
the Chinese ALBERTs, ModernBERT, and `tiny` (for tests and the demo). A run's `model` key names one
(`preset`), optionally with fields changed."""

from __future__ import annotations

import re

from bert_jax.models.config import BertConfig, ConfigError


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
    """ModernBERT (answerdotai/ModernBERT-base, -large).

    Rotary positions, pre-norm with a final norm, GeGLU, no biases but the decoder's, a 128-token
    window with a global layer every third, 8192 positions, OLMo's 50368-token vocabulary, no
    dropout."""
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
