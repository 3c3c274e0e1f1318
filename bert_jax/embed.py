"""Sentence embeddings: one vector per input text.

    bert-jax embed --checkpoint MODEL_DIR --input texts.txt --output vectors.npy \
        [--pooling cls|mean|pooler] [--layer N] [--batch-size N] [--max-seq-length N]
        [--attention-impl einsum|fused]
"""

from __future__ import annotations

import argparse
import functools
import os
from typing import Sequence

import jax
import numpy as np

from bert_jax import pretrained
from bert_jax.config import ATTENTION_IMPLS, BertConfig, check_inputs_fit
from bert_jax.errors import UserError, check_positive
from bert_jax.model import BertModel, mean_pool
from bert_jax.tokenization import load_tokenizer

POOLINGS = ("cls", "mean", "pooler")
MIN_SEQ_LENGTH = 3  # [CLS] one token [SEP]


def encode_texts(tokenizer, texts: Sequence[str], max_seq_length: int):
    """[CLS] text [SEP] ids, truncated to `max_seq_length`: a list of int lists."""
    body = max_seq_length - 2
    return [[tokenizer.cls_id, *tokenizer.encode(t).ids[:body], tokenizer.sep_id]
            for t in texts]


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
    return mean_pool(states, mask)


def embed_texts(model: pretrained.Pretrained, texts: Sequence[str], *, pooling: str = "mean",
                layer: int = -1, batch_size: int = 32, max_seq_length: int = 128,
                attention_impl: str | None = None) -> np.ndarray:
    """Embeds `texts` with a loaded model: float32 [len(texts), H].

    pooling: `cls` ([CLS] state), `mean` (average over real tokens, [CLS] and [SEP]
    included, as sentence-transformers does) or `pooler` (BERT's tanh pooler).
    layer: which hidden state to pool (-1 the last, 0 the embeddings); not with `pooler`.
    attention_impl: einsum or fused (docs/performance.md); None keeps the model's.
    """
    config = model.config.replace(attention_impl=attention_impl or model.config.attention_impl)
    if pooling not in POOLINGS:
        raise ValueError(f"unknown pooling {pooling!r}; choose from {', '.join(POOLINGS)}")
    if not -config.num_hidden_layers - 1 <= layer <= config.num_hidden_layers:
        raise ValueError(f"--layer {layer} is out of range for a model with "
                         f"{config.num_hidden_layers} layers (0..{config.num_hidden_layers})")
    layer = layer % (config.num_hidden_layers + 1)
    layer = -1 if layer == config.num_hidden_layers else layer
    if pooling == "pooler" and (layer != -1 or "pooler" not in model.params["bert"]):
        raise ValueError("--pooling pooler needs the last layer and a model with a pooler")
    check_positive("--batch-size", batch_size)
    if not isinstance(max_seq_length, int) or max_seq_length < MIN_SEQ_LENGTH:
        raise UserError(f"--max-seq-length must be at least {MIN_SEQ_LENGTH} ([CLS] text "
                        f"[SEP]), got {max_seq_length!r}")
    max_seq_length = min(max_seq_length, config.max_position_embeddings)
    tokenizer = load_tokenizer(model.tokenizer_dir)
    check_inputs_fit(config, model.tokenizer_dir, vocab_size=tokenizer.vocab_size)
    encoded = encode_texts(tokenizer, texts, max_seq_length)
    params = model.params["bert"]
    if pooling != "pooler":
        params = {k: v for k, v in params.items() if k != "pooler"}
    # Longest first so each batch pads little; results go back to input order.
    order = sorted(range(len(encoded)), key=lambda i: -len(encoded[i]))
    out = np.zeros((len(encoded), config.hidden_size), np.float32)
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        length = _bucket(len(encoded[rows[0]]), max_seq_length)
        ids = np.zeros((batch_size, length), np.int32)  # fixed batch: one compile per length
        for r, i in enumerate(rows):
            ids[r, :len(encoded[i])] = encoded[i]
        mask = (np.arange(length)[None] < np.array(
            [len(encoded[i]) for i in rows] + [0] * (batch_size - len(rows)))[:, None])
        vectors = _embed_batch(params, ids, mask.astype(np.int32), config=config,
                               pooling=pooling, layer=layer)
        out[rows] = np.asarray(vectors[:len(rows)], np.float32)
    return out


def read_lines(path: str) -> list[str]:
    """The lines of a UTF-8 text file, without their newlines."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise ValueError(f"{path}: line {line} is not valid UTF-8 ({e.reason})") from None
    return text.splitlines()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bert-jax embed", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True,
                        help="model directory (bert-jax convert) or pretraining workdir")
    parser.add_argument("--input", required=True, help="UTF-8 text, one input per line")
    parser.add_argument("--output", required=True, help=".npy file of float32 [lines, hidden]")
    parser.add_argument("--pooling", choices=POOLINGS, default="cls")
    parser.add_argument("--layer", type=int, default=-1,
                        help="hidden state to pool: -1 last (default), 0 embeddings")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--attention-impl", choices=ATTENTION_IMPLS, default=None,
                        help="fused: jax.nn.dot_product_attention (cuDNN on GPU in bf16); "
                             "default: the model's (einsum unless it was set)")
    args = parser.parse_args(argv)
    texts = read_lines(args.input)
    model = pretrained.load(args.checkpoint)
    vectors = embed_texts(model, texts, pooling=args.pooling, layer=args.layer,
                          batch_size=args.batch_size, max_seq_length=args.max_seq_length,
                          attention_impl=args.attention_impl)
    tmp = args.output + ".tmp.npy"
    np.save(tmp, vectors)
    os.replace(tmp, args.output)
    print(f"wrote {vectors.shape[0]} x {vectors.shape[1]} vectors to {args.output}")
    return 0
