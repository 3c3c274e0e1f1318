"""`bert-jax extend-vocab`: add whole-word tokens to a model's WordPiece vocabulary.

  bert-jax extend-vocab --model MODEL_DIR --add_tokens FILE --output MODEL_DIR2

FILE has one token per line. New tokens first replace the `[unusedN]`
placeholders that BERT vocabularies reserve for this (their embedding rows are
kept: they were never trained towards any word), then go at the end of the
vocabulary with fresh rows drawn from BERT's initializer (normal, stddev
`initializer_range`, truncated at 2 sigma) and a zero MLM output bias. Rows of
existing tokens are untouched, so text made of old tokens encodes and computes
exactly as before.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any, Sequence

import numpy as np

from bert_jax.errors import UserError
from bert_jax.host import encoding, paths
from bert_jax.tokenization import WordPieceTokenizer, load_tokenizer
from bert_jax.weights import pretrained

_UNUSED = re.compile(r"\[unused\d+\]$")


def placements(vocab: Sequence[str], new_tokens: Sequence[str]) -> tuple[dict[int, str],
                                                                          list[str]]:
    """Where new tokens go: ({unused slot id: token}, [tokens appended at the end]).

    Tokens already in the vocabulary and repeats are skipped.
    """
    known, seen, fresh = set(vocab), set(), []
    for token in new_tokens:
        if token not in known and token not in seen:
            seen.add(token)
            fresh.append(token)
    slots = [i for i, t in enumerate(vocab) if _UNUSED.match(t)]
    return dict(zip(slots, fresh)), fresh[len(slots):]


def _normalise(token: str, tokenizer: WordPieceTokenizer) -> str:
    """The form the tokenizer's matching sees.

    Uncased vocabularies match lower case without accents."""
    token = token.strip()
    if tokenizer.do_lower_case and not token.startswith("["):
        token = "".join(c for c in unicodedata.normalize("NFD", token.lower())
                        if unicodedata.category(c) != "Mn")
    return token


def extend(model: pretrained.Pretrained, new_tokens: Sequence[str], seed: int = 0
           ) -> tuple[Any, dict[str, Any], WordPieceTokenizer, dict[str, Any]]:
    """Adds tokens to a loaded model: returns (config, params, tokenizer, summary).

    Word embeddings [V, H] grow to [V + appended, H]; the MLM output bias [V] (if any) to
    [V + appended]. `summary` says {"slots": {id: token}, "appended": [tokens], ...}.
    Raises UserError for a token the tokenizer would not keep as one piece.
    """
    tokenizer = load_tokenizer(model.tokenizer_dir)
    if not isinstance(tokenizer, WordPieceTokenizer):
        raise UserError("extend-vocab supports WordPiece vocabularies (vocab.txt); add "
                        "user-defined symbols to a SentencePiece model when training it")
    old_vocab = [tokenizer.id_to_token(i) for i in range(tokenizer.vocab_size)]
    if len(old_vocab) != model.config.vocab_size:
        raise UserError(f"the tokenizer has {len(old_vocab)} tokens but the model has "
                        f"vocab_size={model.config.vocab_size}")
    wanted = [t for t in (_normalise(t, tokenizer) for t in new_tokens) if t]
    slots, appended = placements(old_vocab, wanted)
    vocab = list(old_vocab)
    for index, token in slots.items():
        vocab[index] = token
    vocab += appended
    new_tokenizer = WordPieceTokenizer(vocab, do_lower_case=tokenizer.do_lower_case)
    _check_single_pieces(new_tokenizer, [*slots.values(), *appended])

    config = model.config.replace(vocab_size=len(vocab))
    params = _grow_vocab_rows(model.params, len(appended), config.initializer_range, seed)
    summary = {"slots": slots, "appended": appended,
               "already_known": len(set(wanted)) - len(slots) - len(appended)}
    return config, params, new_tokenizer, summary


def _check_single_pieces(tokenizer: WordPieceTokenizer, tokens: Sequence[str]) -> None:
    """Every new word must come out of the tokenizer as exactly itself."""
    broken = []
    for token in tokens:
        if token.startswith("##"):  # a continuation piece, not a word of its own
            continue
        if tokenizer.encode(token).tokens != [token]:
            broken.append(f"{token!r} -> {tokenizer.encode(token).tokens}")
    if broken:
        raise UserError("these tokens would not stay single pieces (BERT splits words at "
                        "whitespace and punctuation): " + "; ".join(broken))


def _grow_vocab_rows(params: dict[str, Any], count: int, stddev: float, seed: int
                     ) -> dict[str, Any]:
    """Appends `count` rows to the word embeddings and to the MLM output bias.

    The embeddings get truncated-normal rows, the bias zeros; every other parameter is shared with
    the input tree."""
    if count == 0:
        return params
    embeddings = params["bert"]["embeddings"]
    table = np.asarray(embeddings["word_embeddings"]["embedding"])
    rows = _truncated_normal(np.random.default_rng(seed), (count, table.shape[1]), stddev)
    params = {**params, "bert": {**params["bert"], "embeddings": {
        **embeddings, "word_embeddings": {"embedding": np.concatenate(
            [table, rows.astype(table.dtype)])}}}}
    if "mlm" in params:
        bias = np.asarray(params["mlm"]["output_bias"])
        params["mlm"] = {**params["mlm"], "output_bias": np.concatenate(
            [bias, np.zeros(count, bias.dtype)])}
    return params


def _truncated_normal(rng: np.random.Generator, shape, stddev: float) -> np.ndarray:
    """Normal(0, stddev) redrawn outside 2 sigma, like BERT's initializer."""
    values = rng.standard_normal(shape)
    outside = np.abs(values) > 2
    while outside.any():
        values[outside] = rng.standard_normal(outside.sum())
        outside = np.abs(values) > 2
    return (values * stddev).astype(np.float32)


def read_token_file(path: str) -> list[str]:
    """The tokens of a UTF-8 file, one a line.

    Bytes that are not UTF-8 fail in one line naming them (`bert_jax.host.encoding`)."""
    text = encoding.decode(paths.read_bytes(path), path)
    return [line.strip() for line in text.splitlines() if line.strip()]
