"""The tokenizer interface every part of bert_jax uses.

Three implementations: `WordPieceTokenizer` (BERT `vocab.txt`), `SentencePieceTokenizer`
(an `spm.model` with padding, unknown, [CLS], [SEP] and [MASK] pieces, optionally with
ALBERT's text preprocessing, or with XLM-R's or CamemBERT's fairseq ids) and
`JsonTokenizer` (a Hugging Face `tokenizer.json`). Each names its special tokens
(`special_id`) and how rows are built around one text or two (`pair_format`).
"""
import abc
import dataclasses
import hashlib
import json
from typing import Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from bert_jax.errors import UserError
from bert_jax.host import paths

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
CONFIG_NAME = "tokenizer_config.json"
# The file `save` writes beside it, by kind.
VOCAB_FILE, SPM_FILE = "vocab.txt", "spm.model"


class TokenizerError(UserError):
    """A vocabulary or model file is missing or unusable."""


@dataclasses.dataclass
class Encoding:
    """One tokenized text, without special tokens.

    `offsets[i]` is the `(start, end)` character span of token i in the original
    text; `word_ids[i]` numbers the word token i belongs to (0, 1, ...), where a
    word is what whole-word masking keeps together.
    """
    ids: List[int]
    tokens: List[str]
    offsets: List[Tuple[int, int]]
    word_ids: List[int]

    def __len__(self):
        return len(self.ids)


# One item of a PairFormat: "A" or "B" (a text's tokens) or a special token's id, with the
# segment (token type) id its tokens get.
Slot = Tuple[Union[str, int], int]


@dataclasses.dataclass(frozen=True)
class PairFormat:
    """Where a model family puts its special tokens around one text or two, and the segment ids.

    `single` holds one text, `pair` two: BERT's `[CLS] A [SEP] B [SEP]` with segments 0/1, RoBERTa's
    `<s> A </s></s> B </s>` all segment 0, or what a tokenizer.json's post-processor says."""
    single: Tuple[Slot, ...]
    pair: Tuple[Slot, ...]

    @classmethod
    def bert(cls, cls_id: int, sep_id: int) -> "PairFormat":
        return cls(((cls_id, 0), ("A", 0), (sep_id, 0)),
                   ((cls_id, 0), ("A", 0), (sep_id, 0), ("B", 1), (sep_id, 1)))

    @classmethod
    def roberta(cls, cls_id: int, sep_id: int) -> "PairFormat":
        return cls(((cls_id, 0), ("A", 0), (sep_id, 0)),
                   ((cls_id, 0), ("A", 0), (sep_id, 0), (sep_id, 0), ("B", 0), (sep_id, 0)))

    def num_added(self, pair: bool) -> int:
        """How many special tokens a row of one text (or of two) gets."""
        return sum(slot not in ("A", "B") for slot, _ in (self.pair if pair else self.single))

    @property
    def text_start(self) -> int:
        """The position of a one-text row's first text token (1 after BERT's [CLS])."""
        return [slot for slot, _ in self.single].index("A")

    def second_start(self, a_length: int) -> int:
        """The position of a pair row's first token of the second text.

        It follows a first text of `a_length` tokens (`a_length + 2` after BERT's
        `[CLS] a [SEP]`)."""
        slots = [slot for slot, _ in self.pair]
        before = slots[:slots.index("B")]
        return sum(a_length if slot == "A" else 1 for slot in before)

    def build(self, a: Sequence[int], b: Optional[Sequence[int]] = None
              ) -> Tuple[List[int], List[int]]:
        """(input_ids, segment_ids) of the row.

        The texts' ids `a` (and `b`) with the special tokens around them."""
        ids, segments = [], []
        for slot, segment in (self.single if b is None else self.pair):
            tokens = a if slot == "A" else b if slot == "B" else [slot]
            ids += tokens
            segments += [segment] * len(tokens)
        return ids, segments

    def tf_build(self, pieces):
        """`build` in TF ops.

        The texts' ids, int RaggedTensors [B, (tokens)] (one or two) -> (input_ids, segment_ids)
        RaggedTensors [B, (length)] int32."""
        import tensorflow as tf
        template = self.single if len(pieces) == 1 else self.pair
        like = tf.RaggedTensor.from_tensor(tf.zeros([pieces[0].nrows(), 1], tf.int32))
        ids, segments = [], []
        for slot, segment in template:
            part = (tf.cast(pieces["AB".index(slot)], tf.int32) if slot in ("A", "B")
                    else like + slot)
            ids.append(part)
            segments.append(part * 0 + segment)
        return tf.concat(ids, axis=1), tf.concat(segments, axis=1)


class Tokenizer(abc.ABC):
    """Text -> ids with offsets and word boundaries; no special tokens added."""

    @abc.abstractmethod
    def encode(self, text: str) -> Encoding:
        ...

    def encode_batch(self, texts: Iterable[str]) -> List[Encoding]:
        return [self.encode(t) for t in texts]

    def encode_ids(self, texts: Iterable[str]) -> List[List[int]]:
        """Ids only, one list per text: the fast path for data generation."""
        return [self.encode(t).ids for t in texts]

    @property
    @abc.abstractmethod
    def vocab_size(self) -> int:
        ...

    @abc.abstractmethod
    def token_to_id(self, token: str) -> int:
        """Id of `token`, or `unk_id` when it is not in the vocabulary."""

    @abc.abstractmethod
    def id_to_token(self, index: int) -> str:
        ...

    @abc.abstractmethod
    def save(self, directory: str) -> None:
        """Writes the files `load_tokenizer(directory)` reads back."""

    def fingerprint(self) -> str:
        """sha256 hex of what decides the ids.

        That is the tokens in id order and the casing (and ALBERT's preprocessing). Checkpoints and
        converted data record it so a different vocabulary is noticed."""
        digest = hashlib.sha256(f"{type(self).__name__} {self.fingerprint_options()}\n".encode())
        for index in range(self.vocab_size):
            digest.update(self.id_to_token(index).encode("utf-8") + b"\n")
        return digest.hexdigest()

    def fingerprint_options(self) -> str:
        """The settings besides the tokens that decide the ids, for `fingerprint`."""
        return f"lower={getattr(self, 'do_lower_case', None)}"

    @abc.abstractmethod
    def tf_tokenize(self, texts):
        """tf.string tensor [N] -> tf.RaggedTensor [N, None] of int32 ids (in-graph)."""

    @abc.abstractmethod
    def tf_module(self):
        """The tensorflow-text tokenizer behind `tf_tokenize` (a tf.Module, built once).

        A SavedModel that embeds the tokenizer must track it."""

    @abc.abstractmethod
    def word_start_table(self) -> np.ndarray:
        """bool [vocab_size]: True where a token can start a word (whole-word masking)."""

    def special_id(self, kind: str) -> int:
        """The id of special token `kind` ('pad', 'unk', 'cls', 'sep' or 'mask').

        BERT's [PAD]-style name here; tokenizers whose special tokens are named otherwise override
        this."""
        return self.token_to_id(f"[{kind.upper()}]")

    @property
    def pad_id(self) -> int:
        return self.special_id("pad")

    @property
    def unk_id(self) -> int:
        return self.special_id("unk")

    @property
    def cls_id(self) -> int:
        return self.special_id("cls")

    @property
    def sep_id(self) -> int:
        return self.special_id("sep")

    @property
    def mask_id(self) -> int:
        return self.special_id("mask")

    def special_ids(self) -> dict:
        """{'pad': id, 'unk': id, 'cls': id, 'sep': id, 'mask': id}."""
        return {"pad": self.pad_id, "unk": self.unk_id, "cls": self.cls_id,
                "sep": self.sep_id, "mask": self.mask_id}

    @property
    def pair_format(self) -> PairFormat:
        """How rows are built around texts: BERT's `[CLS] A [SEP] B [SEP]` here.

        RoBERTa-family and tokenizer.json tokenizers override this."""
        return PairFormat.bert(self.cls_id, self.sep_id)

    def build_inputs(self, a: Sequence[int], b: Optional[Sequence[int]] = None
                     ) -> Tuple[List[int], List[int]]:
        """(input_ids, segment_ids) of one row, as transformers' `tokenizer(a, b)` builds them.

        The family's special tokens go around the ids of one text `a` or of two."""
        return self.pair_format.build(a, b)

    def convert_ids_to_tokens(self, ids: Sequence[int]) -> List[str]:
        return [self.id_to_token(int(i)) for i in ids]


# Above this share of [UNK] tokens the vocabulary does not cover the text.
UNKNOWN_SHARE_WARNING = 0.05


def uncovered_text_warning(unknown: int, tokens: int, what: str, cjk_share: float = 0.0) -> str:
    """A warning line when too many of `what`'s `tokens` are [UNK]; else ''.

    Too many is more than UNKNOWN_SHARE_WARNING (text in a script the vocabulary lacks).
    `cjk_share`: the text's share of CJK ideographs (`chars.cjk_share`); only mostly-CJK text is
    told about Chinese."""
    if not tokens or unknown / tokens <= UNKNOWN_SHARE_WARNING:
        return ""
    return (f"{unknown / tokens:.0%} of the tokens of {what} are [UNK]: the vocabulary does "
            "not cover this text " + ("(Chinese text needs a Chinese vocabulary: "
                                      "docs/chinese.md)" if cjk_share > 0.5 else
                                      "(another language or script, or symbols it lacks?)"))


def write_config(directory: str, config: dict) -> None:
    paths.makedirs(directory)
    paths.write_text(paths.join(directory, CONFIG_NAME), json.dumps(config, indent=2) + "\n")
