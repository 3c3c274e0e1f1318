"""SentencePiece (unigram or BPE) behind the bert_jax tokenizer interface.

The padding and unknown pieces are the ones the model itself declares (`[PAD]`/`[UNK]`
in models trained by `bert_jax.data.build_vocab`, `<pad>`/`<unk>` in Google's ALBERT
`spiece.model`); `[CLS]`, `[SEP]` and `[MASK]` are looked up by name. With
`albert=AlbertNormalization(...)` the text goes through ALBERT's preprocessing and its
digit-comma split (`albert_text`), which a model directory records. A word starts at
every piece that begins with the meta symbol "▁" (SentencePiece's own notion of a
whitespace-separated word), which is what whole-word masking groups.

With `layout=` the ids are fairseq's, as XLM-RoBERTa's and CamemBERT's
`sentencepiece.bpe.model` are used (`FAIRSEQ_LAYOUTS`): a few special tokens first, the
model's pieces after them, `<mask>` last; rows are `<s> A </s></s> B </s>`.
"""
import dataclasses
from typing import List, Optional

import numpy as np
import sentencepiece as spm

from bert_jax.host import paths
from bert_jax.tokenization import base
from bert_jax.tokenization.albert_text import WORD_START, AlbertNormalization, digit_comma_splits

NAMED_SPECIALS = {"cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}
# fairseq's ids of a SentencePiece model: (the tokens before its pieces, how many of its
# first pieces those replace); then its other pieces in order, then <mask>. The same
# layout as transformers' XLMRobertaTokenizer and CamembertTokenizer.
FAIRSEQ_LAYOUTS = {"xlm-roberta": (("<s>", "<pad>", "</s>", "<unk>"), 3),
                   "camembert": (("<s>NOTUSED", "<pad>", "</s>NOTUSED", "<unk>",
                                  "<unk>NOTUSED"), 1)}
FAIRSEQ_SPECIALS = {"pad": "<pad>", "unk": "<unk>", "cls": "<s>", "sep": "</s>",
                    "mask": "<mask>"}


class SentencePieceTokenizer(base.Tokenizer):
    """Wraps a `.model` file; offsets come from SentencePiece's byte spans."""

    def __init__(self, model_path: str, albert: Optional[AlbertNormalization] = None,
                 layout: Optional[str] = None):
        if layout is not None and layout not in FAIRSEQ_LAYOUTS:
            raise base.TokenizerError(f"SentencePiece layout must be one of "
                                      f"{', '.join(FAIRSEQ_LAYOUTS)}; got {layout!r}")
        if not paths.isfile(model_path):
            raise base.TokenizerError(f"SentencePiece model not found: {model_path}")
        self.model_path = model_path
        self.albert = albert
        self.layout = layout
        self._model = paths.read_bytes(model_path)
        if not self._model:
            raise base.TokenizerError(f"SentencePiece model {model_path} is empty")
        try:
            self._sp = spm.SentencePieceProcessor(model_proto=self._model)
        except RuntimeError as e:
            raise base.TokenizerError(f"{model_path} is not a SentencePiece model: "
                                      f"{str(e).splitlines()[0]}") from None
        sp_pieces = [self._sp.id_to_piece(i) for i in range(self._sp.get_piece_size())]
        self._pieces, self._sp_to_id = sp_pieces, None  # our tokens by id; sp id -> ours
        if layout is not None:
            head, replaced = FAIRSEQ_LAYOUTS[layout]
            self._pieces = [*head, *sp_pieces[replaced:], "<mask>"]
            unk = head.index("<unk>")
            self._sp_to_id = np.array(
                [head.index(p) if p in head else unk for p in sp_pieces[:replaced]]
                + list(range(len(head), len(head) + len(sp_pieces) - replaced)), np.int64)
        self._ids = {p: i for i, p in enumerate(self._pieces)}
        self._special = self._find_specials()
        self._special_ids = set(self._special.values())
        # ALBERT's digit-comma split, as {piece id: [(id, piece), ...]}
        self._splits = {} if albert is None else {
            index: [(self._ids.get(p, self._sp.unk_id()), p) for p in pieces]
            for index, pieces in digit_comma_splits(self._sp).items()}
        self._tf_tokenizer = None

    def _find_specials(self) -> dict:
        """{"pad", "unk", "cls", "sep", "mask"} -> id; a one-line error names what is missing."""
        if self.layout is not None:
            missing = [name for name in FAIRSEQ_SPECIALS.values() if name not in self._ids]
            if missing:
                raise base.TokenizerError(f"SentencePiece model {self.model_path} has no "
                                          f"{' or '.join(missing)} piece, which the "
                                          f"{self.layout} layout needs")
            return {kind: self._ids[name] for kind, name in FAIRSEQ_SPECIALS.items()}
        special = {"pad": self._sp.pad_id(), "unk": self._sp.unk_id()}
        special.update({kind: self._ids.get(name, -1) for kind, name in NAMED_SPECIALS.items()})
        names = {"pad": "padding (pad_id)", "unk": "unknown (unk_id)", **NAMED_SPECIALS}
        missing = [names[kind] for kind, index in special.items() if index < 0]
        if missing:
            raise base.TokenizerError(
                f"SentencePiece model {self.model_path} has no {' or '.join(missing)} piece: "
                "BERT needs padding, unknown, [CLS], [SEP] and [MASK] pieces (train it with "
                "pad_id=0 unk_id=1 and [CLS],[SEP],[MASK] as control or user-defined symbols)")
        return special

    def special_id(self, kind: str) -> int:
        return self._special[kind]

    @property
    def pair_format(self) -> base.PairFormat:
        if self.layout is None:
            return super().pair_format
        return base.PairFormat.roberta(self.cls_id, self.sep_id)

    @property
    def vocab_size(self) -> int:
        return len(self._pieces)

    def token_to_id(self, token: str) -> int:
        return self._ids.get(token, self.unk_id)

    def id_to_token(self, index: int) -> str:
        return self._pieces[index]

    @property
    def model_bytes(self) -> bytes:
        """The SentencePiece model file's bytes."""
        return self._model

    def save(self, directory: str) -> None:
        paths.makedirs(directory)
        target = paths.join(directory, base.SPM_FILE)
        if paths.abspath(target) != paths.abspath(self.model_path):
            with paths.open(target, "wb") as f:
                f.write(self._model)
        config = {"type": "sentencepiece"}
        if self.albert is not None:
            config["albert"] = dataclasses.asdict(self.albert)
        if self.layout is not None:
            config["layout"] = self.layout
        base.write_config(directory, config)

    def fingerprint_options(self) -> str:
        options = super().fingerprint_options()
        if self.layout is not None:
            options += f" layout={self.layout}"
        return options if self.albert is None else f"{options} albert={self.albert}"

    def word_start_table(self) -> np.ndarray:
        return np.array([p.startswith(WORD_START) or i in self._special_ids
                         for i, p in enumerate(self._pieces)], bool)

    def encode(self, text: str) -> base.Encoding:
        normalized, starts, ends = (text, None, None) if self.albert is None \
            else self.albert.normalize_with_spans(text)
        proto = self._sp.encode(normalized, return_type="proto")
        char_of_byte = _byte_to_char_index(normalized)
        ids, tokens, offsets, word_ids = [], [], [], []
        word = -1
        for piece in proto.pieces:
            start, end = char_of_byte[piece.begin], char_of_byte[piece.end]
            surface = piece.surface
            leading = len(surface) - len(surface.lstrip())
            if leading < len(surface):  # offsets cover the text, not the space before it
                start += leading
            index = piece.id if self._sp_to_id is None else int(self._sp_to_id[piece.id])
            for index, token, (a, b) in self._split(index, piece.piece, start, end):
                if token.startswith(WORD_START) or word < 0 or index in self._special_ids:
                    word += 1
                ids.append(index)
                tokens.append(token)
                offsets.append((a, b) if starts is None
                               else _original_span(a, b, starts, ends, len(text)))
                word_ids.append(word)
        return base.Encoding(ids, tokens, offsets, word_ids)

    def _split(self, index: int, piece: str, start: int, end: int):
        """(id, piece, span) of the piece, or of the pieces ALBERT's digit-comma split makes of it.

        Each digit piece spans its characters, the "," the last."""
        if index not in self._splits:
            yield index, piece, (start, end)
            return
        *digits, comma = self._splits[index]
        for part_id, part in digits:
            length = len(part.lstrip(WORD_START))
            yield part_id, part, (start, min(start + length, end - 1))
            start += length
        yield comma[0], comma[1], (end - 1, end)

    def encode_batch(self, texts) -> List[base.Encoding]:
        return [self.encode(t) for t in texts]

    def encode_ids(self, texts) -> List[List[int]]:
        if self._sp_to_id is not None:
            return [self._sp_to_id[row].tolist() for row in self._sp.encode(list(texts))]
        if self.albert is None:
            return self._sp.encode(list(texts))
        rows = self._sp.encode([self.albert.normalize(t) for t in texts])
        if not self._splits:
            return rows
        return [[i for index in row for i in (
            [p for p, _ in self._splits[index]] if index in self._splits else [index])]
            for row in rows]

    def tf_module(self):
        import tensorflow as tf
        import tensorflow_text as tf_text
        if self._tf_tokenizer is None:
            self._tf_tokenizer = tf_text.SentencepieceTokenizer(model=self._model,
                                                                 out_type=tf.int32)
        return self._tf_tokenizer

    def tf_tokenize(self, texts):
        """tf.string [N] -> RaggedTensor [N, None] int32, via tensorflow-text.

        ALBERT's preprocessing and digit-comma split run as TF ops."""
        import tensorflow as tf
        if self.albert is not None:
            texts = self.albert.tf_normalize(texts)
        ids = self.tf_module().tokenize(texts)
        if self._sp_to_id is not None:
            return tf.ragged.map_flat_values(tf.gather, tf.constant(self._sp_to_id, tf.int32),
                                             ids)
        if not self._splits:
            return ids
        rows = [[p for p, _ in self._splits[i]] if i in self._splits else [i]
                for i in range(self.vocab_size)]
        table = tf.RaggedTensor.from_row_lengths(  # id -> the ids it becomes
            tf.constant([i for row in rows for i in row], tf.int32),
            tf.constant([len(row) for row in rows], tf.int64))
        pieces = tf.gather(table, ids.flat_values)  # [tokens, (ids)]
        return tf.RaggedTensor.from_row_splits(pieces, ids.row_splits).merge_dims(1, 2)


def _original_span(a: int, b: int, starts: List[int], ends: List[int], length: int):
    """Characters [a, b) of the normalized text as a span of the original text."""
    if b > a:
        return starts[a], ends[b - 1]
    position = starts[a] if a < len(starts) else length
    return position, position


def _byte_to_char_index(text: str) -> List[int]:
    """[len(utf8) + 1] list mapping each UTF-8 byte offset to a char offset."""
    if text.isascii():
        return range(len(text) + 1)
    mapping = []
    for index, ch in enumerate(text):
        mapping.extend([index] * len(ch.encode("utf-8")))
    mapping.append(len(text))
    return mapping
