"""Chinese word boundaries for whole-word masking (BERT-wwm).

BERT's tokenizer makes every CJK character a word of its own, so the `##` rule
that groups English pieces into words never groups Chinese characters. The
words come from a segmenter instead: jieba (imported only when a line has CJK
text) or a reference segmentation in BERT-wwm's format, one line of
space-separated words per input line, blank lines where the input has them.

A token *continues a word* when it starts inside the same segmented word as
the token before it (中国, but also １９９８年 or T恤); `##` pieces continue
their word whatever the segmentation says, so mixed text keeps English whole
words. Lines without CJK characters are not segmented at all.
"""
from typing import Callable, List, Optional, Sequence, Tuple

from bert_jax.errors import UserError
from bert_jax.host import encoding, paths
from bert_jax.tokenization.chars import is_cjk

SEGMENTERS = ("jieba", "none")
Segmenter = Callable[[str], List[str]]


def has_cjk(text: str) -> bool:
    return any(is_cjk(ord(ch)) for ch in text)


def jieba_segmenter() -> Segmenter:
    """jieba's default (precise, HMM) mode, imported on the first call.

    Its dictionary is loaded (~1 s) on the first call too, so text without Chinese never pays for
    it."""
    loaded = []

    def segment(line: str) -> List[str]:
        if not loaded:
            import logging

            import jieba
            jieba.setLogLevel(logging.WARNING)
            loaded.append(jieba.cut)
        return list(loaded[0](line))
    return segment


def make_segmenter(name: str) -> Optional[Segmenter]:
    """'jieba' -> a segmenter; 'none' -> None (CJK characters masked one by one)."""
    if name not in SEGMENTERS:
        raise UserError(f"unknown chinese_segmenter {name!r}: use one of {list(SEGMENTERS)}")
    return jieba_segmenter() if name == "jieba" else None


def word_spans(text: str, words: Sequence[str], where: str = "") -> List[Tuple[int, int]]:
    """Character spans of `words` in `text`; whitespace between (or inside) them is skipped.

    Raises UserError naming `where` (file and line) when the words do not spell
    `text` once whitespace is ignored.
    """
    spans, position = [], 0
    for word in words:
        word = "".join(word.split())
        if not word:
            continue
        while position < len(text) and text[position].isspace():
            position += 1
        start = position
        for ch in word:
            while position < len(text) and text[position].isspace():
                position += 1
            if position >= len(text) or text[position] != ch:
                raise UserError(
                    f"{where}: the reference words do not spell the input line: word "
                    f"{word!r} does not match the text at character {start} "
                    f"({text[start:start + len(word) + 5]!r})")
            position += 1
        spans.append((start, position))
    if text[position:].strip():
        raise UserError(f"{where}: the reference words end before the input line does: "
                        f"{text[position:position + 20]!r} is left over")
    return spans


def continues_word(offsets: Sequence[Tuple[int, int]],
                   spans: Sequence[Tuple[int, int]]) -> List[bool]:
    """bool per token: whether it continues the word the token before it starts in.

    Tokens are given by character offsets; True where the token starts inside the segmented word
    (`spans`) that the token before it starts in."""
    word_of = {}
    for index, (start, end) in enumerate(spans):
        for position in range(start, end):
            word_of[position] = index
    words = [word_of.get(start) for start, _ in offsets]
    return [False] + [here is not None and here == before
                      for before, here in zip(words, words[1:])]


# --- ERNIE's knowledge masking: entities and phrases, masked as whole units ---------------

KNOWLEDGE_MASKING = ("none", "entity", "phrase")
ENTITY_TAGS = ("nr", "ns", "nt", "nz")  # person, place, organisation, other proper noun


def jieba_entities() -> Callable[[str], List[Tuple[int, int]]]:
    """Entity spans from jieba.posseg.

    Words tagged nr* (person; jieba also has nrt, nrfg), ns, nt or nz; adjacent entity words make
    one entity (上海 浦东 -> 上海浦东)."""
    loaded = []

    def entities(line: str) -> List[Tuple[int, int]]:
        if not loaded:
            import logging

            import jieba
            import jieba.posseg
            jieba.setLogLevel(logging.WARNING)
            loaded.append(jieba.posseg.cut)
        spans, position = [], 0
        for word, flag in loaded[0](line):
            start, position = position, position + len(word)
            if not word.strip() or not flag.startswith(ENTITY_TAGS):
                continue
            if spans and spans[-1][1] == start:
                spans[-1] = (spans[-1][0], position)
            else:
                spans.append((start, position))
        return spans
    return entities


def entity_list(path: str) -> Callable[[str], List[Tuple[int, int]]]:
    """Entity spans from a list file (one entity per line, UTF-8): leftmost-longest matches."""
    text = encoding.decode(paths.read_bytes(path), path)
    names = {"".join(line.split()) for line in text.splitlines()} - {""}
    if not names:
        raise UserError(f"{path}: the entity list is empty (one entity per line)")
    by_first = {}
    for name in names:
        by_first.setdefault(name[0], set()).add(name)
    longest = max(map(len, names))

    def entities(line: str) -> List[Tuple[int, int]]:
        spans, position = [], 0
        while position < len(line):
            candidates = by_first.get(line[position], ())
            size = next((n for n in range(min(longest, len(line) - position), 0, -1)
                         if line[position:position + n] in candidates), 0)
            if size > 1:  # a one-character entity is already a whole unit
                spans.append((position, position + size))
            position += max(size, 1)
        return spans
    return entities
