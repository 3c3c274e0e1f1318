"""Raw text to token inputs and tags back to text.

The host-side pieces that fine-tuning and the serving exports (`bert_jax.serve.export`) share, so
that neither imports the other. No jax here.

- pairs: `[CLS] a [SEP] (b [SEP])`, or the model family's own format, with longest-first
  truncation (`encode_pair`);
- words: raw text split as character-level CoNLL data is, each word's tokens, and the
  same split in TF ops for the SavedModel (`tf_split_words`, `word_tag_records`);
- entities: the spans of IOB2 (BIO)/IOB1/IOBES/BILOU/BMES tag sequences, with
  seqeval's chunking.
"""

from __future__ import annotations

import functools
import sys
from typing import Iterable, Sequence

import numpy as np

from bert_jax.errors import UserError
from bert_jax.tokenization.chars import is_cjk, is_punctuation

# How a text longer than its share of max_seq_length is cut: BERT keeps its start;
# "head+tail" keeps the first quarter of the budget from the start and the rest from
# the end, the best of the strategies Sun et al. (2019) compared on long documents.
TRUNCATION_HEAD_FRACTION = {"head": 1.0, "head+tail": 0.25}


def head_fraction(truncation: str) -> float:
    """The share of a cut text's budget taken from its start."""
    if truncation not in TRUNCATION_HEAD_FRACTION:
        raise UserError(f"truncation must be one of {', '.join(TRUNCATION_HEAD_FRACTION)}; "
                        f"got {truncation!r}")
    return TRUNCATION_HEAD_FRACTION[truncation]


def pair_lengths(len_a: int, len_b: int, max_tokens: int) -> tuple[int, int]:
    """Longest-first truncation of two texts, as transformers' `longest_first`.

    As the tokenizers library does it, the shorter text keeps up to half of `max_tokens`
    (rounded down), the longer the rest; on a tie the first counts as the shorter."""
    if len_a + len_b <= max_tokens:
        return len_a, len_b
    kept_short = min(len_a, len_b, max_tokens // 2)
    return ((kept_short, max_tokens - kept_short) if len_a <= len_b
            else (max_tokens - kept_short, kept_short))


def truncate_pair(a: list, b: list | None, max_tokens: int, head: float = 1.0
                  ) -> tuple[list, list | None]:
    """Longest-first truncation (`pair_lengths`); one text is cut to `max_tokens`.

    Each cut list keeps `head` of its length from its start and the rest from its end."""
    if b is None:
        return keep_head_tail(a, min(len(a), max_tokens), head), None
    len_a, len_b = pair_lengths(len(a), len(b), max_tokens)
    return keep_head_tail(a, len_a, head), keep_head_tail(b, len_b, head)


def keep_head_tail(tokens: list, length: int, head: float) -> list:
    if len(tokens) <= length:
        return list(tokens)
    start = int(length * head)
    return list(tokens[:start]) + list(tokens[len(tokens) - (length - start):])


def encode_pair(tokenizer, text_a: str, text_b: str | None, max_seq_length: int,
                truncation: str = "head") -> tuple[list[int], list[int]]:
    """(input_ids, segment_ids) of one text or a pair in the model family's format.

    That is `[CLS] a [SEP] b [SEP]` with segments 0/1 for BERT, `<s> a </s></s> b </s>` all 0 for
    RoBERTa (`tokenizer.build_inputs`); at most `max_seq_length` ids."""
    a = tokenizer.encode(text_a).ids
    b = None if text_b is None else tokenizer.encode(text_b).ids
    a, b = truncate_pair(a, b, max_seq_length - tokenizer.pair_format.num_added(b is not None),
                         head_fraction(truncation))
    return tokenizer.build_inputs(a, b)


def split_words(text: str) -> tuple[list[str], list[tuple[int, int]]]:
    """Words of raw text as character-level CoNLL splits them, and their character spans.

    The spans are (start, end) in `text`. In a text with a CJK character every non-space character
    is a word, digits and Latin letters included (Chinese NER corpora put one character per line, so
    an entity may start anywhere in `992XR`); in other texts each punctuation character is a word
    and other runs end at whitespace."""
    chars = any(is_cjk(ord(ch)) for ch in text)
    words, spans, start = [], [], None
    for i, ch in enumerate(text + " "):
        alone = is_punctuation(ch) or (chars and not ch.isspace())
        if start is not None and (ch.isspace() or alone):
            words.append(text[start:i])
            spans.append((start, i))
            start = None
        if alone:
            words.append(ch)
            spans.append((i, i + 1))
        elif start is None and not ch.isspace():
            start = i
    return words, spans


_PREDICATES = {"cjk": lambda ch: is_cjk(ord(ch)), "punctuation": is_punctuation,
               "space": str.isspace}


@functools.cache
def _regex_class(kind: str) -> str:
    """RE2 class of the characters `split_words` tests with `_PREDICATES[kind]`.

    It is read from the same Python predicates: RE2's Unicode tables are not Python's."""
    size = sys.maxunicode + 1
    flags = np.fromiter(map(_PREDICATES[kind], map(chr, range(size))), bool, size)
    edges = np.flatnonzero(np.diff(np.concatenate([[False], flags, [False]])))
    return "[" + "".join(rf"\x{{{start:X}}}-\x{{{end - 1:X}}}"
                         for start, end in edges.reshape(-1, 2)) + "]"


def tf_split_words(texts):
    """`split_words` in TF ops: tf.string [B] -> (words, starts, ends).

    RaggedTensors [B, (words)] of strings and of int32 character (code point) offsets into each
    text. Works per character (tensorflow-text's regex_split stops at a NUL)."""
    import tensorflow as tf
    chars = tf.strings.unicode_split(texts, "UTF-8")
    flat = chars.flat_values
    space = tf.strings.regex_full_match(flat, _regex_class("space"))
    cjk = tf.strings.regex_full_match(flat, _regex_class("cjk"))
    chars_text = tf.gather(tf.math.unsorted_segment_max(  # texts with a CJK character
        tf.cast(cjk, tf.int32), chars.value_rowids(), tf.shape(texts)[0]) > 0,
        chars.value_rowids())
    alone = tf.strings.regex_full_match(flat, _regex_class("punctuation")) | (
        chars_text & ~space)
    in_run = ~space & ~alone
    position = tf.ragged.range(chars.row_lengths()).flat_values  # in its text
    after_run = tf.concat([[False], in_run], 0)[:-1] & (position > 0)
    first_char = alone | (in_run & ~after_run)
    word_of_char = tf.boolean_mask(tf.cumsum(tf.cast(first_char, tf.int64)) - 1, ~space)
    # (joined in order; a word's characters are consecutive)
    words = tf.strings.unsorted_segment_join(tf.boolean_mask(flat, ~space), word_of_char,
                                             tf.reduce_sum(tf.cast(first_char, tf.int64)))
    ends = tf.math.segment_max(tf.boolean_mask(position + 1, ~space), word_of_char)
    starts = tf.boolean_mask(position, first_char)
    by_text = lambda values: tf.RaggedTensor.from_value_rowids(
        values, tf.boolean_mask(chars.value_rowids(), first_char),
        tf.shape(texts, out_type=tf.int64)[0])
    return (by_text(words), by_text(tf.cast(starts, tf.int32)),
            by_text(tf.cast(ends, tf.int32)))


def word_tag_records(texts: list[str], outputs: dict, scheme: str | None = None
                     ) -> list[dict]:
    """A tagging SavedModel's `serve_text` outputs as the records `ServedModel.tag_texts` returns.

    The outputs are numpy arrays; the records are {'words', 'tags', 'offsets', 'entities'} per text.
    `scheme`, the model's tag scheme (serving.json's task `tag_scheme`), rewrites the tags well
    formed in it as `tag_texts` does."""
    missing = [k for k in ("num_words", "word_starts", "word_ends", "word_tags")
               if k not in outputs]
    if missing:
        raise UserError(f"outputs lack {', '.join(missing)}: pass the serve_text outputs "
                        f"of a tagging model's SavedModel")
    if len(outputs["num_words"]) != len(texts):
        raise UserError(f"{len(texts)} texts but outputs for {len(outputs['num_words'])}: "
                        f"pass the texts given to serve_text, in order")
    records = []
    for i, text in enumerate(texts):
        n = int(outputs["num_words"][i])
        spans = [(int(s), int(e)) for s, e in zip(outputs["word_starts"][i][:n],
                                                  outputs["word_ends"][i][:n])]
        tags = rewrite_tags([t.decode("utf-8") if isinstance(t, bytes) else str(t)
                             for t in outputs["word_tags"][i][:n]], scheme)
        records.append({"words": [text[s:e] for s, e in spans], "tags": tags,
                        "offsets": [list(span) for span in spans],
                        "entities": tagged_entities(text, spans, tags)})
    return records


def text_example(text: str) -> dict:
    words, spans = split_words(text)
    return {"words": words, "tags": None, "text": text, "spans": spans}


def tagged_entities(text: str, spans: list[tuple[int, int]], tags: list[str]) -> list[dict]:
    """[{'type', 'start', 'end', 'text'}] in order: the entities of a BIO/IOBES tag sequence.

    Each is a character span [start, end) of `text` (`spans`: each word's)."""
    found = sorted(entities([tags]), key=lambda e: e[1])
    return [{"type": type_, "start": spans[first][0], "end": spans[last][1],
             "text": text[spans[first][0]:spans[last][1]]}
            for type_, first, last in found if type_ != "_"]


def encode_entities(spans: Iterable[tuple[str, int, int]], length: int, scheme: str
                    ) -> list[str]:
    """Tags of `length` words in `scheme` for entities (type, first, last) that do not overlap.

    `scheme` is IOB2, IOB1, IOBES, BILOU or BMES."""
    tags = ["O"] * length
    previous: tuple[str, int] | None = None  # (type, last) of the entity before
    for type_, first, last in sorted(spans, key=lambda e: e[1]):
        if scheme in ("IOB2", "IOB1"):  # IOB1: B- only right after an entity of the type
            begin = "B" if scheme == "IOB2" or previous == (type_, first - 1) else "I"
            tags[first:last + 1] = [f"{begin}-{type_}"] + [f"I-{type_}"] * (last - first)
        else:
            single, inside, end = {"IOBES": "SIE", "BILOU": "UIL", "BMES": "SME"}[scheme]
            tags[first:last + 1] = ([f"{single}-{type_}"] if first == last else
                                    [f"B-{type_}"] + [f"{inside}-{type_}"] * (last - first - 1)
                                    + [f"{end}-{type_}"])
        previous = (type_, last)
    return tags


def rewrite_tags(tags: Sequence[str], scheme: str | None) -> list[str]:
    """A predicted tag sequence's entities (seqeval's chunking) written well formed in `scheme`.

    Tags unchanged when the scheme is None (not an NER tag set)."""
    if scheme is None:
        return list(tags)
    return encode_entities([e for e in entities([tags]) if e[0] != "_"], len(tags), scheme)


def word_token_spans(tokenizer, words: list[str]):
    """Tokenizes the words joined by spaces.

    Returns (token ids, start and end token index of each word; start == end for a word that
    produced no token)."""
    char_to_word = np.repeat(np.arange(len(words)), [len(w) + 1 for w in words])
    text = " ".join(words)
    encoding = tokenizer.encode(text)
    # A token's word is its first character's after the space it may start with (a
    # byte-level `Ġword` spans the space before the word unless its offsets are trimmed).
    word_of_token = [int(char_to_word[start + len(text[start:end]) - len(
        text[start:end].lstrip(" "))]) for start, end in encoding.offsets]
    counts = np.bincount(np.asarray(word_of_token, np.int64), minlength=len(words))
    ends = np.cumsum(counts)  # tokens come in word order
    return list(encoding.ids), [int(s) for s in ends - counts], [int(e) for e in ends]


# BILOU's last/unit and BMES's middle are IOBES's end/single and inside.
IOBES_PREFIX = {"L": "E", "U": "S", "M": "I"}


def _split_tag(tag: str) -> tuple[str, str]:
    """A tag's (prefix, type).

    'B-PER' -> ('B', 'PER'), 'M-PER' -> ('I', 'PER') (IOBES prefixes); 'O' -> ('O', '_'); a bare
    type 'PER' -> ('P', 'ER') exactly like seqeval, so a tag set without prefixes should use token
    accuracy."""
    if tag in ("O", ""):
        return "O", "_"
    prefix = IOBES_PREFIX.get(tag[0], tag[0]) if tag[1:2] == "-" else tag[0]
    return prefix, tag[1:].split("-", maxsplit=1)[-1] or "_"


def _chunk_ends(prev_tag, tag, prev_type, type_) -> bool:
    if prev_tag in ("E", "S"):
        return True
    if prev_tag in ("B", "I") and tag in ("B", "S", "O"):
        return True
    return prev_tag not in ("O", ".") and prev_type != type_


def _chunk_starts(prev_tag, tag, prev_type, type_) -> bool:
    if tag in ("B", "S"):
        return True
    if prev_tag in ("E", "S", "O") and tag in ("E", "I"):
        return True
    return tag not in ("O", ".") and prev_type != type_


def entities(sequences: Iterable[Sequence[str]]) -> set[tuple[str, int, int]]:
    """The (type, first, last) token spans of the entities in tag sequences.

    The tag sequences are IOB2/IOB1/IOBES/BILOU/BMES.

    seqeval's default (lenient, conlleval-like) chunking, BILOU and BMES read as the
    IOBES they spell (`IOBES_PREFIX`): an `I-X` after `O` or after a different type
    starts an entity; sequences are joined with an `O` between them, so positions index
    the concatenation.
    """
    flat: list[str] = []
    for seq in sequences:
        flat.extend(seq)
        flat.append("O")
    found = set()
    prev_tag, prev_type, start = "O", "", 0
    for i, tag_str in enumerate(flat + ["O"]):
        tag, type_ = _split_tag(tag_str)
        if _chunk_ends(prev_tag, tag, prev_type, type_):
            found.add((prev_type, start, i - 1))
        if _chunk_starts(prev_tag, tag, prev_type, type_):
            start = i
        prev_tag, prev_type = tag, type_
    return found
