"""Tokenizers: BERT WordPiece and SentencePiece behind one interface.

    tok = load_tokenizer(DEFAULT_VOCAB)        # a directory, vocab.txt or .model
    enc = tok.encode("Hello world")            # ids, tokens, offsets, word_ids
"""
import json
import os
from typing import Optional

from bert_jax.tokenization.base import (CONFIG_NAME, SPECIAL_TOKENS, Encoding, Tokenizer,
                                        TokenizerError)
from bert_jax.tokenization.sentencepiece_tokenizer import SentencePieceTokenizer
from bert_jax.tokenization.wordpiece import WordPieceTokenizer

DEFAULT_VOCAB = os.path.join(os.path.dirname(os.path.dirname(__file__)), "resources", "vocab")

__all__ = ["DEFAULT_VOCAB", "Encoding", "SPECIAL_TOKENS", "SentencePieceTokenizer",
           "Tokenizer", "TokenizerError", "WordPieceTokenizer", "load_tokenizer"]


def load_tokenizer(path: str, do_lower_case: Optional[bool] = None) -> Tokenizer:
    """Loads a tokenizer from a directory written by `Tokenizer.save`, a bare
    BERT `vocab.txt` (uncased unless `do_lower_case=False`) or a SentencePiece
    `.model` file. An explicit `do_lower_case` overrides a directory's config.
    """
    if os.path.isdir(path):
        config = {}
        config_path = os.path.join(path, CONFIG_NAME)
        if os.path.isfile(config_path):
            with open(config_path) as f:
                config = json.load(f)
        if config.get("type") == "sentencepiece" or os.path.isfile(os.path.join(path, "spm.model")):
            return SentencePieceTokenizer(os.path.join(path, "spm.model"))
        if do_lower_case is None:
            do_lower_case = config.get("do_lower_case", True)
        return WordPieceTokenizer.from_file(os.path.join(path, "vocab.txt"), do_lower_case)
    if not os.path.exists(path):
        raise TokenizerError(f"tokenizer not found: {path} (expected a directory, a vocab.txt "
                             "or a SentencePiece .model file)")
    if path.endswith(".model"):
        return SentencePieceTokenizer(path)
    return WordPieceTokenizer.from_file(path, True if do_lower_case is None else do_lower_case)
