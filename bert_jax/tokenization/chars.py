"""Character classes as BERT's tokenizer defines them.

Shared by the tokenizer, Chinese word segmentation, the tagging text splitter and the QA metrics:
each CJK ideograph and each punctuation character is a word of its own."""

from __future__ import annotations

import unicodedata


def is_cjk(cp: int) -> bool:
    """Whether code point `cp` is a CJK ideograph (BERT's _is_chinese_char ranges)."""
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or
            0x20000 <= cp <= 0x2A6DF or 0x2A700 <= cp <= 0x2B73F or
            0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF or
            0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


def cjk_share(texts) -> float:
    """The share of CJK ideographs among the non-space characters of `texts`."""
    cjk = total = 0
    for text in texts:
        for ch in text:
            if not ch.isspace():
                total += 1
                cjk += is_cjk(ord(ch))
    return cjk / total if total else 0.0


def is_punctuation(ch: str) -> bool:
    """ASCII symbols and every Unicode P* character."""
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")
