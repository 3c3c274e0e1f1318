"""A Hugging Face `tokenizer.json` (the `tokenizers` library's format: ModernBERT's
byte-level BPE, and most models published since) behind the bert_jax tokenizer interface.

The ids are the `tokenizers` library's own, without the special tokens its post-processor
would add (bert_jax adds [CLS]/[SEP] itself). The special tokens are found by name: BERT's
`[CLS]`, `[SEP]`, `[MASK]`, `[PAD]`, `[UNK]` (as ModernBERT's file has them), else RoBERTa's
`<s>`, `</s>`, `<mask>`, `<pad>`, `<unk>`. A word starts at a token after whitespace (the
byte-level `Ġ` or SentencePiece's `▁` prefix) and at every special token.
"""
from typing import List

import numpy as np

from bert_jax.host import paths
from bert_jax.tokenization import base

JSON_FILE = "tokenizer.json"
_NAMES = {"pad": ("[PAD]", "<pad>"), "unk": ("[UNK]", "<unk>"), "cls": ("[CLS]", "<s>"),
          "sep": ("[SEP]", "</s>"), "mask": ("[MASK]", "<mask>")}
_WORD_START = ("Ġ", "▁")


class JsonTokenizer(base.Tokenizer):
    """Wraps a `tokenizer.json` file read with the `tokenizers` library."""

    def __init__(self, path: str):
        from tokenizers import Tokenizer as RustTokenizer

        if not paths.isfile(path):
            raise base.TokenizerError(f"tokenizer.json not found: {path}")
        self.path = path
        self._json = paths.read_text(path)
        try:
            self._tok = RustTokenizer.from_str(self._json)
        except Exception as e:  # tokenizers raises plain Exceptions
            raise base.TokenizerError(f"{path} is not a tokenizers file: "
                                      f"{str(e).splitlines()[0]}") from None
        self._vocab = self._tok.get_vocab(with_added_tokens=True)
        self._tokens = {i: t for t, i in self._vocab.items()}
        self._special = {}
        for kind, names in _NAMES.items():
            found = [self._vocab[n] for n in names if n in self._vocab]
            if not found:
                raise base.TokenizerError(f"{path} has no {' or '.join(names)} token: a BERT "
                                          "needs padding, unknown, [CLS], [SEP] and [MASK]")
            self._special[kind] = found[0]
        self._special_ids = set(self._special.values())
        self._tf_tokenizer = None

    def special_id(self, kind: str) -> int:
        return self._special[kind]

    @property
    def vocab_size(self) -> int:
        return max(self._tokens) + 1

    def token_to_id(self, token: str) -> int:
        return self._vocab.get(token, self.unk_id)

    def id_to_token(self, index: int) -> str:
        return self._tokens.get(index, "")

    def save(self, directory: str) -> None:
        paths.makedirs(directory)
        target = paths.join(directory, JSON_FILE)
        if paths.abspath(target) != paths.abspath(self.path):
            paths.write_text(target, self._json)
        base.write_config(directory, {"type": "tokenizers"})

    def word_start_table(self) -> np.ndarray:
        return np.array([self.id_to_token(i).startswith(_WORD_START) or i in self._special_ids
                         for i in range(self.vocab_size)], bool)

    def encode(self, text: str) -> base.Encoding:
        enc = self._tok.encode(text, add_special_tokens=False)
        word, word_ids = -1, []
        for index, token in zip(enc.ids, enc.tokens):
            if token.startswith(_WORD_START) or word < 0 or index in self._special_ids:
                word += 1
            word_ids.append(word)
        return base.Encoding(list(enc.ids), list(enc.tokens), list(enc.offsets), word_ids)

    def encode_ids(self, texts) -> List[List[int]]:
        return [e.ids for e in self._tok.encode_batch(list(texts), add_special_tokens=False)]

    def tf_module(self):
        raise base.TokenizerError("a tokenizer.json tokenizer has no TensorFlow op: it cannot "
                                  "be embedded in a SavedModel (export without the tokenizer)")

    def tf_tokenize(self, texts):
        """tf.string [N] -> RaggedTensor [N, None] int32, through the `tokenizers` library
        in a tf.py_function (host Python, not a graph op)."""
        import tensorflow as tf

        def run(batch):
            rows = self.encode_ids(t.decode("utf-8") for t in batch.numpy())
            flat = np.array([i for row in rows for i in row], np.int32)
            return flat, np.array([len(row) for row in rows], np.int64)

        flat, lengths = tf.py_function(run, [texts], [tf.int32, tf.int64])
        flat.set_shape([None])
        lengths.set_shape([None])
        return tf.RaggedTensor.from_row_lengths(flat, lengths)
