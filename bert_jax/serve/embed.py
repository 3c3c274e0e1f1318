"""Sentence embeddings (one vector per input line) or per-token features.

    bert-jax embed --model MODEL_DIR --input texts.txt --output vectors.npy \
        [--pooling cls|mean|pooler|max|mean_sqrt_len] [--layer N] [--batch_size N]
        [--max_seq_length N] [--attention_impl einsum|fused]
    bert-jax embed --model MODEL_DIR --input texts.txt --output feats.npz --per_token \
        [--layers -4,-3,-2,-1 --combine sum|concat|mean] [...]

--per_token writes an .npz with one row per WordPiece of every line, [CLS] and [SEP]
included, in order: `vectors` float32 [N, H] ([N, len(layers) * H] with concat),
`line_index` int [N] (the input line) and `tokens` [N] (the WordPiece strings).
Layers count as in transformers' hidden_states: 0 the embeddings, -1 the last layer.
"""

from __future__ import annotations

import functools
import logging
from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.errors import UserError, check_positive
from bert_jax.models.config import BertConfig, check_inputs_fit
from bert_jax.models.encoder import BertModel, mean_pool
from bert_jax.tokenization import load_tokenizer
from bert_jax.weights import pretrained, sentence_embedding

POOLINGS = sentence_embedding.EMBED_POOLINGS  # cls, mean, pooler
COMBINES = ("sum", "concat", "mean")
# The shortest row that embeds any text, [CLS] one token [SEP] (a training row is longer:
# run_config.MIN_TRAINING_SEQ_LENGTH).
MIN_EMBED_SEQ_LENGTH = 3


def encode_texts(tokenizer, texts: Sequence[str], max_seq_length: int):
    """[CLS] text [SEP] ids, truncated to `max_seq_length`: a list of int lists.

    For a model family with its own row, that row (`<s> text </s>`). `texts` must be strings and
    `max_seq_length` at least MIN_EMBED_SEQ_LENGTH (UserError)."""
    texts = check_texts(texts)
    check_max_seq_length(max_seq_length)
    body = max_seq_length - tokenizer.pair_format.num_added(False)
    return [tokenizer.build_inputs(tokenizer.encode(t).ids[:body])[0] for t in texts]


def check_texts(texts: Sequence[str]) -> list[str]:
    """`texts` as a list, refused (UserError) unless every item is a string.

    One str is refused too: it would embed each letter."""
    if isinstance(texts, (str, bytes)):
        raise UserError(f"texts must be a list of strings, got one {type(texts).__name__} "
                        "(one text: [text])")
    texts = list(texts)
    for text in texts:
        if not isinstance(text, str):
            raise UserError(f"texts must be a list of strings, got an item {text!r}")
    return texts


def check_max_seq_length(max_seq_length: int) -> None:
    """The row length must hold [CLS] text [SEP]: an integer >= MIN_EMBED_SEQ_LENGTH."""
    if not isinstance(max_seq_length, int) or isinstance(max_seq_length, bool) \
            or max_seq_length < MIN_EMBED_SEQ_LENGTH:
        raise UserError(f"--max_seq_length must be at least {MIN_EMBED_SEQ_LENGTH} ([CLS] text "
                        f"[SEP]), got {max_seq_length!r}")


def _bucket(length: int, max_seq_length: int) -> int:
    """Pads lengths to a few shapes (multiples of 32) so jit compiles only a few times."""
    return min(max_seq_length, -(-length // 32) * 32)


@functools.partial(jax.jit, static_argnames=("config", "pooling", "layer"))
def _embed_batch(params, ids, mask, *, config: BertConfig, pooling: str, layer: int):
    model = BertModel(config, add_pooling_layer=pooling == "pooler",
                      output_hidden_states=layer != -1)
    out = model.apply({"params": params}, ids, mask)
    if pooling == "pooler":
        return out.pooled_output
    states = out.sequence_output if layer == -1 else out.hidden_states[layer]
    if pooling == "cls":
        return states[:, 0]
    if pooling == "max":  # sentence-transformers': padding at -1e9, then the maximum
        return jnp.where(mask[..., None] > 0, states.astype(jnp.float32), -1e9).max(1)
    if pooling == "mean_sqrt_len":  # the sum over real tokens / sqrt(their number)
        real = mask[..., None].astype(jnp.float32)
        return (states.astype(jnp.float32) * real).sum(1) / jnp.sqrt(
            jnp.maximum(real.sum(1), 1e-9))
    return mean_pool(states, mask)


def _layer_index(flag: str, layer: int, config: BertConfig) -> int:
    """`layer` as an index into hidden_states; negative values count from the last.

    Index 0 is the embeddings, .. config.depth the layers applied."""
    n = config.depth
    if not isinstance(layer, int) or isinstance(layer, bool):
        raise UserError(f"{flag} takes integers (0 the embeddings, -1 the last layer), "
                        f"got {layer!r}")
    if not -n - 1 <= layer <= n:
        raise UserError(f"{flag} {layer} is out of range for a model with {n} layers "
                        f"(0..{n}, or -{n + 1}..-1 from the last)")
    return layer % (n + 1)


def _tokenizer(model: pretrained.Pretrained, config: BertConfig, batch_size: int,
               max_seq_length: int):
    """The tokenizer and max_seq_length, after checking the inputs.

    max_seq_length is capped at the model's positions; the checks are of the batch size, the length
    and that the vocabulary fits the model."""
    check_positive("--batch_size", batch_size)
    check_max_seq_length(max_seq_length)
    tokenizer = load_tokenizer(model.tokenizer_dir)
    check_inputs_fit(config, model.tokenizer_dir, vocab_size=tokenizer.vocab_size)
    if max_seq_length > config.max_positions:
        logging.getLogger("bert_jax").warning(
            "--max_seq_length %d exceeds the model's %d positions: inputs are cut at %d "
            "tokens", max_seq_length, config.max_positions, config.max_positions)
    return tokenizer, min(max_seq_length, config.max_positions)


def _encoder_params(model: pretrained.Pretrained, config: BertConfig, pooler: bool):
    """The model's encoder weights as `BertModel(config)` takes them.

    They are on the default device (`pretrained.init_params`)."""
    ids = jnp.zeros((1, MIN_EMBED_SEQ_LENGTH), jnp.int32)
    target = jax.eval_shape(lambda: BertModel(config, add_pooling_layer=pooler).init(
        jax.random.key(0), ids, ids)["params"])
    return pretrained.init_params(nn.unbox(target), model.params["bert"], drop=("pooler",),
                                  source=model.tokenizer_dir)


def embed_texts(model: pretrained.Pretrained, texts: Sequence[str], *, pooling: str = "mean",
                layer: int = -1, batch_size: int = 32, max_seq_length: int = 128,
                attention_impl: str | None = None) -> np.ndarray:
    """Embeds `texts` with a loaded model: float32 [len(texts), H].

    pooling: `cls` ([CLS] state), `mean` (average over real tokens, [CLS] and [SEP]
    included, as sentence-transformers does), `pooler` (BERT's tanh pooler), or
    sentence-transformers' `max` and `mean_sqrt_len` (the sum over sqrt(length)).
    layer: which hidden state to pool (-1 the last, 0 the embeddings); not with `pooler`.
    A converted sentence-transformers model's Dense layers follow its own pooling of the last
    layer, unless it has modules embed cannot reproduce (its Normalize is the caller's:
    `bert-jax embed` applies it).
    attention_impl: einsum or fused (docs/performance.md); None keeps the model's.
    """
    texts = check_texts(texts)
    config = model.config.replace(attention_impl=attention_impl or model.config.attention_impl)
    if pooling not in POOLINGS:
        raise UserError(f"unknown pooling {pooling!r}; choose from {', '.join(POOLINGS)}")
    layer = _layer_index("--layer", layer, config)
    layer = -1 if layer == config.depth else layer
    if pooling == "pooler" and (layer != -1 or "pooler" not in model.params["bert"]):
        raise UserError("--pooling pooler needs the last layer and a model with a pooler")
    tokenizer, max_seq_length = _tokenizer(model, config, batch_size, max_seq_length)
    encoded = encode_texts(tokenizer, texts, max_seq_length)
    params = _encoder_params(model, config, pooler=pooling == "pooler")
    run = functools.partial(_embed_batch, params, config=config, pooling=pooling, layer=layer)
    out = np.zeros((len(encoded), config.hidden_size), np.float32)
    for rows, vectors in _batches(encoded, batch_size, max_seq_length, run):
        out[rows] = vectors[:len(rows)]
    own = sentence_embedding.read(model.tokenizer_dir)
    if pooling == own.get("pooling") and layer == -1 and not own.get("unreproduced"):
        out = sentence_embedding.apply_dense(out, sentence_embedding.dense_layers(
            model.tokenizer_dir))
    return out


def _batches(encoded: list[list[int]], batch_size: int, max_seq_length: int, run):
    """(rows, float32 numpy run(ids, mask)) per batch of `encoded` (id lists).

    Longest first so each batch pads little, lengths bucketed, rows indices into `encoded`."""
    order = sorted(range(len(encoded)), key=lambda i: -len(encoded[i]))
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        length = _bucket(len(encoded[rows[0]]), max_seq_length)
        ids = np.zeros((batch_size, length), np.int32)  # fixed batch: one compile per length
        for r, i in enumerate(rows):
            ids[r, :len(encoded[i])] = encoded[i]
        mask = (np.arange(length)[None] < np.array(
            [len(encoded[i]) for i in rows] + [0] * (batch_size - len(rows)))[:, None])
        yield rows, np.asarray(run(ids, mask.astype(np.int32)), np.float32)


@functools.partial(jax.jit, static_argnames=("config", "layers", "combine"))
def _token_batch(params, ids, mask, *, config: BertConfig, layers: tuple[int, ...],
                 combine: str):
    out = BertModel(config, add_pooling_layer=False, output_hidden_states=True).apply(
        {"params": params}, ids, mask)
    states = [out.hidden_states[i].astype(jnp.float32) for i in layers]
    if combine == "concat":
        return jnp.concatenate(states, axis=-1)
    total = functools.reduce(jnp.add, states)
    return total / len(states) if combine == "mean" else total


def token_features(model: pretrained.Pretrained, texts: Sequence[str], *,
                   layers: Sequence[int] = (-1,), combine: str = "sum", batch_size: int = 32,
                   max_seq_length: int = 128, attention_impl: str | None = None) -> dict:
    """Features of every token of every text, [CLS] and [SEP] included, in order.

    This is the feature-based approach of the BERT paper, e.g. the sum or concatenation of the last
    four layers for NER.

    layers: hidden states as in transformers' hidden_states (0 the embeddings, -1 the
    last layer); combine: how several layers make one vector (sum, concat or mean).
    Returns {"vectors": float32 [N, H] ([N, len(layers) * H] for concat),
    "line_index": int64 [N], "tokens": str [N]} for the N tokens of all texts.
    """
    config = model.config.replace(attention_impl=attention_impl or model.config.attention_impl)
    if combine not in COMBINES:
        raise UserError(f"unknown --combine {combine!r}; choose from {', '.join(COMBINES)}")
    if isinstance(layers, int) or not layers:
        raise UserError("--layers names no layer" if not isinstance(layers, int) else
                        f"--layers takes a list of layers, got {layers!r} (one layer: [N])")
    layers = tuple(_layer_index("--layers", layer, config) for layer in layers)
    texts = check_texts(texts)
    if not texts:
        raise UserError("the input has no lines: nothing to embed")
    tokenizer, max_seq_length = _tokenizer(model, config, batch_size, max_seq_length)
    encoded = encode_texts(tokenizer, texts, max_seq_length)
    params = _encoder_params(model, config, pooler=False)
    run = functools.partial(_token_batch, params, config=config, layers=layers,
                            combine=combine)
    per_line: list = [None] * len(encoded)
    for rows, vectors in _batches(encoded, batch_size, max_seq_length, run):
        for r, i in enumerate(rows):
            per_line[i] = vectors[r, :len(encoded[i])]
    ids = [t for line in encoded for t in line]
    return {"vectors": np.concatenate(per_line),
            "line_index": np.repeat(np.arange(len(encoded)), [len(e) for e in encoded]),
            "tokens": np.array(tokenizer.convert_ids_to_tokens(ids), dtype=str)}
