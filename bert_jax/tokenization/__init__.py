"""Tokenizers: BERT WordPiece and SentencePiece behind one interface.

    tok = load_tokenizer(DEFAULT_VOCAB)        # a directory, vocab.txt or .model
    enc = tok.encode("Hello world")            # ids, tokens, offsets, word_ids
"""
from typing import Optional

from bert_jax import RESOURCES
from bert_jax.host import encoding, paths
from bert_jax.tokenization.albert_text import AlbertNormalization
from bert_jax.tokenization.base import (
    CONFIG_NAME,
    SPECIAL_TOKENS,
    SPM_FILE,
    VOCAB_FILE,
    Encoding,
    PairFormat,
    Tokenizer,
    TokenizerError,
)
from bert_jax.tokenization.json_tokenizer import JSON_FILE, JsonTokenizer
from bert_jax.tokenization.sentencepiece_tokenizer import SentencePieceTokenizer
from bert_jax.tokenization.wordpiece import WordPieceTokenizer

DEFAULT_VOCAB = paths.join(RESOURCES, "vocab")

__all__ = ["AlbertNormalization", "DEFAULT_VOCAB", "Encoding", "JsonTokenizer", "PairFormat",
           "SPECIAL_TOKENS", "SentencePieceTokenizer", "Tokenizer", "TokenizerError",
           "WordPieceTokenizer", "has_tokenizer", "load_tokenizer"]


def has_tokenizer(directory: str) -> bool:
    """Whether `directory` holds a saved tokenizer (`load_tokenizer` can read it)."""
    return any(paths.isfile(paths.join(directory, name))
               for name in (VOCAB_FILE, SPM_FILE, JSON_FILE))


def load_tokenizer(path: str, do_lower_case: Optional[bool] = None) -> Tokenizer:
    """Loads a tokenizer from a directory, a vocabulary file or a tokenizer.json.

    The source is a directory written by `Tokenizer.save`, a bare BERT `vocab.txt` (uncased unless
    `do_lower_case=False`), a SentencePiece `.model` file or a Hugging Face `tokenizer.json`. An
    explicit `do_lower_case` overrides a directory's config.
    """
    if path.endswith(JSON_FILE) and paths.isfile(path):
        return JsonTokenizer(path)
    if paths.isdir(path):
        config = {}
        config_path = paths.join(path, CONFIG_NAME)
        if paths.isfile(config_path):
            config = encoding.read_json(config_path)
        if config.get("type") == "tokenizers":
            return JsonTokenizer(paths.join(path, JSON_FILE), config.get("specials"))
        if config.get("type") == "sentencepiece" or paths.isfile(paths.join(path, SPM_FILE)):
            return SentencePieceTokenizer(paths.join(path, SPM_FILE),
                                          _albert_normalization(config, config_path),
                                          config.get("layout"))
        if do_lower_case is None:
            do_lower_case = config.get("do_lower_case", True)
        return WordPieceTokenizer.from_file(paths.join(path, VOCAB_FILE), do_lower_case)
    if not paths.exists(path):
        raise TokenizerError(f"tokenizer not found: {path} (expected a directory, a vocab.txt "
                             "or a SentencePiece .model file)")
    if path.endswith(".model"):
        return SentencePieceTokenizer(path)
    return WordPieceTokenizer.from_file(path, True if do_lower_case is None else do_lower_case)


def _albert_normalization(config: dict, config_path: str) -> Optional[AlbertNormalization]:
    """The ALBERT preprocessing a SentencePiece directory's config records, if any."""
    if config.get("albert") is None:
        return None
    try:
        return AlbertNormalization(**config["albert"])
    except TypeError:
        raise TokenizerError(f"{config_path}: 'albert' takes do_lower_case and keep_accents, "
                             f"not {config['albert']}") from None
