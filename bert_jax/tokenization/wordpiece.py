"""WordPiece tokenization compatible with BERT's `vocab.txt` files.

Normalisation and splitting follow BERT's BasicTokenizer as implemented by
the `tokenizers` library that transformers' `BertTokenizer` uses: control
characters (Unicode category C*, NUL and U+FFFD) are dropped without breaking
a word, whitespace separates words, every CJK ideograph and every punctuation
character is a word of its own; uncased vocabularies also get NFD with the
non-spacing marks removed and per-character lower-casing (which also maps CJK
compatibility ideographs to their unified forms, as BERT does). Words are then split
greedily longest-match-first into pieces with `##` continuations; a word that
cannot be matched, or is longer than 100 characters, becomes `[UNK]`.

Offsets are character spans into the original text; a "word" (for
`word_ids`) is one whitespace/punctuation-separated unit, which is what BERT's
whole-word masking groups through the `##` prefix.
"""
import logging
import re
import unicodedata
from typing import Dict, List, Optional, Tuple

import numpy as np

from bert_jax.host import paths
from bert_jax.tokenization import base
from bert_jax.tokenization.chars import is_cjk, is_punctuation

log = logging.getLogger(__name__)

MAX_CHARS_PER_WORD = 100
_CACHE_LIMIT = 200_000

# Printable ASCII without control characters needs none of the Unicode work.
_ASCII_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_ASCII_WORD = re.compile(r"[A-Za-z0-9]+|[!-/:-@\[-`{-~]")

_DROP, _SPACE, _ISOLATED, _TEXT = range(4)
# RE2 class of what BERT drops: C* categories except \t\n\r (and Cn), and U+FFFD.
_TF_CONTROL = r"[\x{0}-\x{8}\x{B}\x{C}\x{E}-\x{1F}\x{7F}-\x{9F}\p{Cf}\p{Co}\p{Cs}\x{FFFD}]"


def tf_lower_strip_accents(texts):
    """BERT's uncased normalisation in TF ops: lower-case, NFD, drop non-spacing marks.

    Python lower-cases per character (as BERT and transformers do), so Σ is always σ;
    ICU's string lower-casing would make a word-final Σ ς.
    """
    import tensorflow as tf
    import tensorflow_text as tf_text
    texts = tf.strings.lower(tf.strings.regex_replace(texts, "Σ", "σ"), encoding="utf-8")
    return tf.strings.regex_replace(tf_text.normalize_utf8(texts, "NFD"), r"\p{Mn}", "")


def read_vocab(path: str) -> List[str]:
    """Tokens of a BERT `vocab.txt`, one per line, in id order."""
    if not paths.isfile(path):
        raise base.TokenizerError(f"vocabulary file not found: {path}")
    raw = paths.read_bytes(path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise base.TokenizerError(f"vocabulary {path} is not UTF-8: {e}") from None
    tokens = [line.strip() for line in text.split("\n")]
    if tokens and tokens[-1] == "":
        tokens.pop()
    missing = [t for t in base.SPECIAL_TOKENS if t not in tokens]
    if missing:
        raise base.TokenizerError(
            f"vocabulary {path} lacks the special tokens {missing}; a BERT "
            f"vocab.txt needs all of {list(base.SPECIAL_TOKENS)}")
    _warn_duplicates(tokens, path)
    return tokens


def _warn_duplicates(tokens: List[str], path: str) -> None:
    """One warning naming the repeated tokens of a vocabulary, with their lines.

    The text never produces the earlier ids, so they are most likely a mistake in the file."""
    first: Dict[str, int] = {}
    repeats = []
    for line, token in enumerate(tokens, 1):
        if token in first:
            repeats.append(f"{token!r} at lines {first[token]} and {line}")
        first.setdefault(token, line)
    if repeats:
        log.warning("vocabulary %s has %d duplicate token(s) (%s%s): each is only ever read "
                    "as its last id, as Google's BERT and transformers read it", path, len(repeats),
                    "; ".join(repeats[:3]), "; ..." if len(repeats) > 3 else "")


class WordPieceTokenizer(base.Tokenizer):
    """BERT WordPiece over a `vocab.txt`; `do_lower_case` for uncased vocabs."""

    def __init__(self, vocab: List[str], do_lower_case: bool = True):
        self._tokens = list(vocab)
        # A repeated token means its last id, as in Google's BERT and transformers (slow and
        # fast), so a model trained or exported there tokenizes the same here.
        self._vocab = {token: index for index, token in enumerate(self._tokens)}
        self.do_lower_case = do_lower_case
        self._max_piece_chars = max(len(t) for t in self._tokens)
        self._char_cache: Dict[str, Tuple[int, str]] = {}
        self._word_cache: Dict[str, list] = {}
        self._id_cache: Dict[str, List[int]] = {}
        self._tf_tokenizer = None

    @classmethod
    def from_file(cls, path: str, do_lower_case: bool = True) -> "WordPieceTokenizer":
        return cls(read_vocab(path), do_lower_case=do_lower_case)

    # -- interface ------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        return len(self._tokens)

    def token_to_id(self, token: str) -> int:
        return self._vocab.get(token, self._vocab["[UNK]"])

    def id_to_token(self, index: int) -> str:
        return self._tokens[index]

    def save(self, directory: str) -> None:
        paths.makedirs(directory)
        paths.write_text(paths.join(directory, base.VOCAB_FILE),
                         "".join(t + "\n" for t in self._tokens))
        base.write_config(directory, {"type": "wordpiece",
                                      "do_lower_case": self.do_lower_case})

    def word_start_table(self) -> np.ndarray:
        return np.array([not t.startswith("##") for t in self._tokens], bool)

    def encode(self, text: str) -> base.Encoding:
        ids, tokens, offsets, word_ids = [], [], [], []
        for word_index, (word, char_starts) in enumerate(self._split_words(text)):
            for piece_id, start, end in self._word_pieces(word):
                ids.append(piece_id)
                tokens.append(self._tokens[piece_id])
                offsets.append((char_starts[start], char_starts[end - 1] + 1))
                word_ids.append(word_index)
        return base.Encoding(ids, tokens, offsets, word_ids)

    def encode_ids(self, texts) -> List[List[int]]:
        """Same ids as `encode`, without offsets and tokens (about 3x faster)."""
        result = []
        for text in texts:
            if text.isascii() and not _ASCII_CONTROL.search(text):
                words = _ASCII_WORD.findall(text.lower() if self.do_lower_case else text)
            else:
                words = [word for word, _ in self._split_words(text)]
            ids = []
            for word in words:
                word_ids = self._id_cache.get(word)
                if word_ids is None:
                    word_ids = [piece_id for piece_id, _, _ in self._word_pieces(word)]
                    if len(self._id_cache) >= _CACHE_LIMIT:
                        self._id_cache.clear()
                    self._id_cache[word] = word_ids
                ids += word_ids
            result.append(ids)
        return result

    def tf_tokenize(self, texts):
        """tf.string [N] -> RaggedTensor [N, None] int32, via tensorflow-text.

        Same ids as `encode` except for words over 100 *bytes* but at most 100
        characters (tensorflow-text counts bytes), which it maps to `[UNK]`, and
        unassigned code points (RE2 cannot match them, so they are not dropped).
        Uncased, the normalisation is BERT's, done here in TF ops: tensorflow-text's
        own (`lower_case_nfd_strip_accents`) is an NFKC case fold, which turns the
        full-width forms that fill Chinese text (，１Ｆ) into ASCII and ß into ss.
        """
        import tensorflow as tf
        # tensorflow-text splits words at control characters; BERT drops them.
        texts = tf.strings.regex_replace(texts, _TF_CONTROL, "")
        if self.do_lower_case:
            texts = tf_lower_strip_accents(texts)
        return self.tf_module().tokenize(texts)

    def tf_module(self):
        import tensorflow as tf
        import tensorflow_text as tf_text
        if self._tf_tokenizer is None:
            # tensorflow-text refuses repeated tokens: the ids never read (each repeated
            # token's earlier ones) get names no text matches ('[' is a word of its own).
            vocab = [t if self._vocab[t] == i else f"[never-read-{i}]"
                     for i, t in enumerate(self._tokens)]
            self._tf_tokenizer = tf_text.FastBertTokenizer(
                vocab=vocab, token_out_type=tf.int32, lower_case_nfd_strip_accents=False)
        return self._tf_tokenizer

    # -- splitting into words -------------------------------------------------

    def _split_words(self, text: str):
        """Yields (normalised word, original char index of each of its chars)."""
        if text.isascii() and not _ASCII_CONTROL.search(text):
            source = text.lower() if self.do_lower_case else text
            for m in _ASCII_WORD.finditer(source):
                yield m.group(), range(m.start(), m.end())
            return
        chars: List[str] = []
        starts: List[int] = []
        for index, ch in enumerate(text):
            kind, normalized = self._char_info(ch)
            if kind == _DROP:
                continue
            if kind == _TEXT:
                for n in normalized:
                    if is_punctuation(n):
                        if chars:
                            yield "".join(chars), starts
                            chars, starts = [], []
                        yield n, (index,)
                    else:
                        chars.append(n)
                        starts.append(index)
                continue
            if chars:
                yield "".join(chars), starts
                chars, starts = [], []
            if kind == _ISOLATED:
                yield normalized, (index,)
        if chars:
            yield "".join(chars), starts

    def _char_info(self, ch: str) -> Tuple[int, str]:
        info = self._char_cache.get(ch)
        if info is None:
            info = self._classify(ch)
            self._char_cache[ch] = info
        return info

    def _classify(self, ch: str) -> Tuple[int, str]:
        cp = ord(ch)
        category = unicodedata.category(ch)
        if ch in " \t\n\r\u2028\u2029" or category == "Zs":
            return _SPACE, ""
        if cp == 0 or cp == 0xFFFD or category.startswith("C"):
            return _DROP, ""
        if is_cjk(cp):
            # Uncased, BERT isolates CJK characters *then* applies NFD, which maps the
            # compatibility ideographs (U+F900-FAFF, U+2F800-2FA1F) to their unified forms.
            return _ISOLATED, unicodedata.normalize("NFD", ch) if self.do_lower_case else ch
        if not self.do_lower_case:
            return _TEXT, ch
        stripped = "".join(c for c in unicodedata.normalize("NFD", ch)
                           if unicodedata.category(c) != "Mn")
        return _TEXT, "".join(c.lower() for c in stripped)

    # -- WordPiece --------------------------------------------------------------

    def _word_pieces(self, word: str) -> List[Tuple[int, int, int]]:
        """[(piece id, start, end)] with start/end indexing into `word`; cached."""
        pieces = self._word_cache.get(word)
        if pieces is not None:
            return pieces
        pieces = self._greedy_longest_match(word)
        if len(self._word_cache) >= _CACHE_LIMIT:
            self._word_cache.clear()
        self._word_cache[word] = pieces
        return pieces

    def _greedy_longest_match(self, word: str) -> List[Tuple[int, int, int]]:
        unknown = [(self._vocab["[UNK]"], 0, len(word))]
        if len(word) > MAX_CHARS_PER_WORD:
            return unknown
        pieces = []
        start = 0
        while start < len(word):
            end = min(len(word), start + self._max_piece_chars)
            piece_id: Optional[int] = None
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                piece_id = self._vocab.get(piece)
                if piece_id is not None:
                    break
                end -= 1
            if piece_id is None:
                return unknown
            pieces.append((piece_id, start, end))
            start = end
        return pieces
