"""ALBERT's text handling around its SentencePiece model.

It is done as Google's ALBERT code and transformers' (sentencepiece-based) `AlbertTokenizer` do it:

- before SentencePiece: lower-casing character by character (`do_lower_case`; transformers
  does it before ALBERT's own steps, so a final Σ stays σ), whitespace runs collapsed to one
  space and the ends stripped, "``" and "''" replaced by '"', then (unless `keep_accents`)
  NFKD with the combining marks (canonical combining class > 0) dropped, and lower-casing
  the whole text again;
- after it: a piece that ends in a digit and "," (such as "▁1," or "99,") becomes the
  pieces of its digits and a separate ",".

The Python side keeps, for every character of the normalized text, the span of the
original characters it came from, so offsets point into the text the user gave.
"""
import dataclasses
import functools
import re
import unicodedata
from typing import Dict, List, Tuple

WORD_START = "\u2581"
_QUOTES = ("``", "''")
_WORD = re.compile(r"\S+")  # Python's \s is str.isspace(), what str.split() splits on


@dataclasses.dataclass(frozen=True)
class AlbertNormalization:
    """ALBERT's preprocessing options (transformers' `AlbertTokenizer` names, defaults)."""
    do_lower_case: bool = True
    keep_accents: bool = False

    def normalize(self, text: str) -> str:
        """The text SentencePiece gets."""
        if self.do_lower_case:
            text = text.lower() if text.isascii() else "".join(map(str.lower, text))
        text = " ".join(text.split()).replace("``", '"').replace("''", '"')
        if not self.keep_accents and not text.isascii():
            text = "".join(c for c in unicodedata.normalize("NFKD", text)
                           if not unicodedata.combining(c))
        return text.lower() if self.do_lower_case else text

    def normalize_with_spans(self, text: str) -> Tuple[str, List[int], List[int]]:
        """(`normalize(text)`, starts, ends), slower than `normalize`.

        Character i of the normalized text comes from the original characters
        `text[starts[i]:ends[i]]`."""
        if self.do_lower_case:
            text, starts, ends = _per_char(text, list(range(len(text))),
                                           list(range(1, len(text) + 1)), str.lower)
        else:
            starts, ends = list(range(len(text))), list(range(1, len(text) + 1))
        out, out_starts, out_ends = [], [], []
        for match in _WORD.finditer(text):
            first, last = match.span()
            if out:  # the one space between words stands for the whitespace run
                out.append(" ")
                out_starts.append(ends[first - 1])
                out_ends.append(starts[first])
            word = match.group()
            if "``" not in word and "''" not in word:
                out.append(word)
                out_starts += starts[first:last]
                out_ends += ends[first:last]
                continue
            i = first
            while i < last:
                width = 2 if text[i:i + 2] in _QUOTES else 1
                out.append('"' if width == 2 else text[i])
                out_starts.append(starts[i])
                out_ends.append(ends[i + width - 1])
                i += width
        text = "".join(out)
        if not self.keep_accents and not text.isascii():
            text, out_starts, out_ends = _per_char(text, out_starts, out_ends, _strip_accents)
        if self.do_lower_case:  # this time the whole text: a final Σ becomes ς
            lowered = text.lower()
            if len(lowered) != len(text):
                _, out_starts, out_ends = _per_char(text, out_starts, out_ends, str.lower)
            text = lowered
        return text, out_starts, out_ends

    def tf_normalize(self, texts):
        """`normalize`'s text in TensorFlow ops: tf.string [N] -> tf.string [N]."""
        import tensorflow as tf
        import tensorflow_text as tf_text
        if self.do_lower_case:  # ICU would make a word-final Σ ς; per character it is σ
            texts = tf.strings.lower(tf.strings.regex_replace(texts, "Σ", "σ"),
                                     encoding="utf-8")
        texts = tf.strings.regex_replace(texts, _re2_class(_python_spaces()) + "+", " ")
        texts = tf.strings.regex_replace(texts, "^ | $", "")
        texts = tf.strings.regex_replace(texts, "``|''", '"')
        if not self.keep_accents:
            texts = tf.strings.regex_replace(tf_text.normalize_utf8(texts, "NFKD"),
                                             _re2_class(_combining_marks()), "")
        if self.do_lower_case:
            texts = tf.strings.lower(texts, encoding="utf-8")
        return texts


def _per_char(text: str, starts: List[int], ends: List[int], fn):
    """`fn` applied to each character; each output character keeps its source's span."""
    if text.isascii() and fn is str.lower:
        return text.lower(), starts, ends
    out, out_starts, out_ends = [], [], []
    for ch, start, end in zip(text, starts, ends):
        mapped = fn(ch)
        out.append(mapped)
        out_starts.extend([start] * len(mapped))
        out_ends.extend([end] * len(mapped))
    return "".join(out), out_starts, out_ends


def _strip_accents(ch: str) -> str:
    """NFKD without combining marks.

    Per character equals the whole text's NFKD here: canonical reordering only moves the marks that
    are dropped."""
    return "".join(c for c in unicodedata.normalize("NFKD", ch) if not unicodedata.combining(c))


@functools.lru_cache(maxsize=None)
def _python_spaces() -> Tuple[int, ...]:
    return tuple(c for c in range(0x110000) if chr(c).isspace())


@functools.lru_cache(maxsize=None)
def _combining_marks() -> Tuple[int, ...]:
    return tuple(c for c in range(0x110000) if unicodedata.combining(chr(c)))


def _re2_class(codepoints: Tuple[int, ...]) -> str:
    """An RE2 character class of exactly these code points, as ranges."""
    ranges, start = [], None
    for i, c in enumerate(codepoints):
        if start is None:
            start = c
        if i + 1 == len(codepoints) or codepoints[i + 1] != c + 1:
            ranges.append(f"\\x{{{start:X}}}" + (f"-\\x{{{c:X}}}" if c != start else ""))
            start = None
    return "[" + "".join(ranges) + "]"


def digit_comma_splits(sp) -> Dict[int, List[str]]:
    """{piece id: the pieces it becomes} for each piece of `sp` that ends in a digit and ",".

    `sp` is a SentencePiece processor. The digits are encoded on their own (without the leading "▁"
    unless the piece had one) and then ",". Depends on the piece alone, so it is a table."""
    splits = {}
    for index in range(sp.get_piece_size()):
        piece = sp.id_to_piece(index)
        if len(piece) < 2 or piece[-1] != "," or not piece[-2].isdigit():
            continue
        parts = sp.encode(piece[:-1].replace(WORD_START, ""), out_type=str)
        if not piece.startswith(WORD_START) and parts[0].startswith(WORD_START):
            parts = parts[1:] if parts[0] == WORD_START else [parts[0][1:], *parts[1:]]
        splits[index] = parts + [","]
    return splits
