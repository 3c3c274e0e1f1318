"""A Hugging Face `tokenizer.json` behind the bert_jax tokenizer interface.

That is the `tokenizers` library's format: RoBERTa's and ModernBERT's byte-level BPE, XLM-R's and
CamemBERT's Unigram, EuroBERT's Llama-3 BPE, and most models published since.

The ids are the `tokenizers` library's own, without the special tokens its post-processor
would add; `pair_format` reads that post-processor, so rows are built as transformers
builds them (`<s> A </s></s> B </s>` for RoBERTa). The special tokens are the ones the
model's tokenizer_config.json names (`specials`), else found by name: BERT's `[CLS]`,
`[SEP]`, `[MASK]`, `[PAD]`, `[UNK]`, RoBERTa's `<s>`, `</s>`, `<mask>`, `<pad>`, `<unk>`,
Llama-3's `<|begin_of_text|>`, `<|end_of_text|>`, `<|mask|>` or Gemma's `<bos>`, `<eos>`
(mmBERT). A byte-level tokenizer has no unknown token: the padding token stands in. A word
starts at a token after whitespace (the byte-level `Ġ` or SentencePiece's `▁` prefix) and
at every special token.
"""
import json
from typing import Dict, List, Optional

import numpy as np

from bert_jax.host import paths
from bert_jax.tokenization import base

JSON_FILE = "tokenizer.json"
_NAMES = {"pad": ("[PAD]", "<pad>", "<|pad|>"), "unk": ("[UNK]", "<unk>"),
          "cls": ("[CLS]", "<s>", "<|begin_of_text|>", "<bos>"),
          "sep": ("[SEP]", "</s>", "<|end_of_text|>", "<eos>"),
          "mask": ("[MASK]", "<mask>", "<|mask|>")}
_WORD_START = ("Ġ", "▁")


class JsonTokenizer(base.Tokenizer):
    """Wraps a `tokenizer.json` file read with the `tokenizers` library."""

    def __init__(self, path: str, specials: Optional[Dict[str, str]] = None,
                 text: Optional[str] = None):
        """Reads the tokenizer.json at `path`, or `text` if given.

        `path`: the tokenizer.json (or, with `text`, where its text came from); `specials`:
        {kind: token} naming special tokens ('pad', 'unk', 'cls', 'sep', 'mask') that differ from
        the usual names."""
        from tokenizers import Tokenizer as RustTokenizer

        if text is None and not paths.isfile(path):
            raise base.TokenizerError(f"tokenizer.json not found: {path}")
        self.path = path
        self._json = paths.read_text(path) if text is None else text
        try:
            self._tok = RustTokenizer.from_str(self._json)
        except Exception as e:  # tokenizers raises plain Exceptions
            raise base.TokenizerError(f"{path} is not a tokenizers file: "
                                      f"{str(e).splitlines()[0]}") from None
        self._vocab = self._tok.get_vocab(with_added_tokens=True)
        self._tokens = {i: t for t, i in self._vocab.items()}
        self.specials = {k: v for k, v in (specials or {}).items() if v in self._vocab}
        self._special = {}
        for kind, names in _NAMES.items():
            names = (self.specials[kind],) if kind in self.specials else names
            found = [self._vocab[n] for n in names if n in self._vocab]
            if not found and kind == "unk" and "pad" in self._special:
                found = [self._special["pad"]]  # byte-level BPE: every text has ids
            if not found:
                raise base.TokenizerError(f"{path} has no {' or '.join(names)} token: a BERT "
                                          "needs padding, unknown, [CLS], [SEP] and [MASK]")
            self._special[kind] = found[0]
        self._special_ids = set(self._special.values())
        self._pair_format = self._read_pair_format(
            json.loads(self._json).get("post_processor"))
        self._tf_tokenizer = None

    def _read_pair_format(self, processor: Optional[dict]) -> base.PairFormat:
        """The rows the post-processor builds.

        A TemplateProcessing's templates, RobertaProcessing's `<s> A </s></s> B </s>`,
        BertProcessing's (and, without a post-processor that adds tokens, BERT's)
        `[CLS] A [SEP] B [SEP]`."""
        kind = (processor or {}).get("type")
        if kind == "Sequence":
            found = [p for p in processor["processors"] if p.get("type") in (
                "TemplateProcessing", "RobertaProcessing", "BertProcessing")]
            return self._read_pair_format(found[0] if found else None)
        if kind == "RobertaProcessing":
            return base.PairFormat.roberta(processor["cls"][1], processor["sep"][1])
        if kind == "BertProcessing":
            return base.PairFormat.bert(processor["cls"][1], processor["sep"][1])
        if kind == "TemplateProcessing":
            ids = {name: token["ids"] for name, token in processor["special_tokens"].items()}

            def slots(template):
                out = []
                for item in template:
                    if "Sequence" in item:
                        out.append((item["Sequence"]["id"], item["Sequence"]["type_id"]))
                    else:
                        token = item["SpecialToken"]
                        out += [(i, token["type_id"]) for i in ids[token["id"]]]
                return tuple(out)
            return base.PairFormat(slots(processor["single"]), slots(processor["pair"]))
        return base.PairFormat.bert(self.cls_id, self.sep_id)

    @property
    def pair_format(self) -> base.PairFormat:
        return self._pair_format

    def special_id(self, kind: str) -> int:
        return self._special[kind]

    @property
    def vocab_size(self) -> int:
        return max(self._tokens) + 1

    def token_to_id(self, token: str) -> int:
        return self._vocab.get(token, self.unk_id)

    def id_to_token(self, index: int) -> str:
        return self._tokens.get(index, "")

    def to_json(self) -> str:
        """The tokenizer.json text."""
        return self._json

    def save(self, directory: str) -> None:
        paths.makedirs(directory)
        target = paths.join(directory, JSON_FILE)
        if paths.abspath(target) != paths.abspath(self.path):
            paths.write_text(target, self._json)
        config = {"type": "tokenizers"}
        if self.specials:
            config["specials"] = self.specials
        base.write_config(directory, config)

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
        raise base.TokenizerError("a tokenizer.json tokenizer has no TensorFlow op, so no "
                                  "SavedModel can hold it: export with --format jax (token "
                                  "ids in; the tokenizer files are written beside it)")

    def tf_tokenize(self, texts):
        """tf.string [N] -> RaggedTensor [N, None] int32, through the `tokenizers` library.

        It runs in a tf.py_function (host Python, not a graph op)."""
        import tensorflow as tf

        def run(batch):
            rows = self.encode_ids(t.decode("utf-8") for t in batch.numpy())
            flat = np.array([i for row in rows for i in row], np.int32)
            return flat, np.array([len(row) for row in rows], np.int64)

        flat, lengths = tf.py_function(run, [texts], [tf.int32, tf.int64])
        flat.set_shape([None])
        lengths.set_shape([None])
        return tf.RaggedTensor.from_row_lengths(flat, lengths)
