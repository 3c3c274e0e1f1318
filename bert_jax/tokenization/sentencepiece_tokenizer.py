"""SentencePiece (unigram or BPE) behind the bert_jax tokenizer interface.

Models trained by `bert_jax.data.build_vocab` have BERT's special tokens at
fixed ids: [PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4. A word starts at
every piece that begins with the meta symbol "▁" (SentencePiece's own notion
of a whitespace-separated word), which is what whole-word masking groups.
"""
from typing import List

import numpy as np
import sentencepiece as spm

from bert_jax import paths
from bert_jax.tokenization import base

WORD_START = "\u2581"


class SentencePieceTokenizer(base.Tokenizer):
    """Wraps a `.model` file; offsets come from SentencePiece's byte spans."""

    def __init__(self, model_path: str):
        if not paths.isfile(model_path):
            raise base.TokenizerError(f"SentencePiece model not found: {model_path}")
        self.model_path = model_path
        self._model = paths.read_bytes(model_path)
        self._sp = spm.SentencePieceProcessor(model_proto=self._model)
        self._pieces = [self._sp.id_to_piece(i) for i in range(self._sp.get_piece_size())]
        self._ids = {p: i for i, p in enumerate(self._pieces)}
        missing = [t for t in base.SPECIAL_TOKENS if t not in self._ids]
        if missing:
            raise base.TokenizerError(
                f"SentencePiece model {model_path} lacks the special tokens {missing}")
        self._special_ids = {self._ids[t] for t in base.SPECIAL_TOKENS}
        self._tf_tokenizer = None

    @property
    def vocab_size(self) -> int:
        return len(self._pieces)

    def token_to_id(self, token: str) -> int:
        return self._ids.get(token, self._ids["[UNK]"])

    def id_to_token(self, index: int) -> str:
        return self._pieces[index]

    def save(self, directory: str) -> None:
        paths.makedirs(directory)
        target = paths.join(directory, "spm.model")
        if paths.abspath(target) != paths.abspath(self.model_path):
            with paths.open(target, "wb") as f:
                f.write(self._model)
        base.write_config(directory, {"type": "sentencepiece"})

    def word_start_table(self) -> np.ndarray:
        specials = set(base.SPECIAL_TOKENS)
        return np.array([p.startswith(WORD_START) or p in specials for p in self._pieces], bool)

    def encode(self, text: str) -> base.Encoding:
        proto = self._sp.encode(text, return_type="proto")
        char_of_byte = _byte_to_char_index(text)
        ids, tokens, offsets, word_ids = [], [], [], []
        word = -1
        for piece in proto.pieces:
            if piece.piece.startswith(WORD_START) or word < 0 or piece.id in self._special_ids:
                word += 1
            start, end = char_of_byte[piece.begin], char_of_byte[piece.end]
            surface = piece.surface
            leading = len(surface) - len(surface.lstrip())
            if leading < len(surface):  # offsets cover the text, not the space before it
                start += leading
            ids.append(piece.id)
            tokens.append(piece.piece)
            offsets.append((start, end))
            word_ids.append(word)
        return base.Encoding(ids, tokens, offsets, word_ids)

    def encode_batch(self, texts) -> List[base.Encoding]:
        return [self.encode(t) for t in texts]

    def encode_ids(self, texts) -> List[List[int]]:
        return self._sp.encode(list(texts))

    def tf_module(self):
        import tensorflow as tf
        import tensorflow_text as tf_text
        if self._tf_tokenizer is None:
            self._tf_tokenizer = tf_text.SentencepieceTokenizer(model=self._model,
                                                                 out_type=tf.int32)
        return self._tf_tokenizer

    def tf_tokenize(self, texts):
        """tf.string [N] -> RaggedTensor [N, None] int32, via tensorflow-text."""
        return self.tf_module().tokenize(texts)


def _byte_to_char_index(text: str) -> List[int]:
    """[len(utf8) + 1] list mapping each UTF-8 byte offset to a char offset."""
    if text.isascii():
        return range(len(text) + 1)
    mapping = []
    for index, ch in enumerate(text):
        mapping.extend([index] * len(ch.encode("utf-8")))
    mapping.append(len(text))
    return mapping
