"""Tokenizers against independent references: transformers' BertTokenizer
(the Rust `tokenizers` implementation) for ids, offsets and words, and
tensorflow-text for the in-graph path."""
import glob
import gzip
import os
import subprocess
import sys
import unicodedata

import pytest

from bert_jax.data import cli as data_cli
from bert_jax.data import corpus
from bert_jax.tokenization import (
    DEFAULT_VOCAB,
    SentencePieceTokenizer,
    TokenizerError,
    WordPieceTokenizer,
    has_tokenizer,
    load_tokenizer,
)

from helpers import REPO

# The tests that need a real English corpus read Brown from the shared data beside the
# clone when it is there, else the corpus shipped in the package (KJV + State of the
# Union), so they run on any fresh clone. BERT_JAX_SHARED_DATA moves the lookup (a
# missing directory exercises the fallback).
SHARED_DATA = os.environ.get("BERT_JAX_SHARED_DATA", os.path.join(REPO, "..", "shared", "data"))
BROWN = os.path.join(SHARED_DATA, "corpus", "brown.txt.gz")

ADVERSARIAL = [
    "Héllo Wörld ÀÉÎÕÜ ñ ç naïve café résumé", "中文字符测试 日本語 한국어 混合text字",
    "emoji 😀👍🏽 🇺🇸 ❤️ ok", "zero\u200bwidth\u200cnon\u200djoiner x\ufeffy",
    "ctrl\x00a\x01b\x07c\x7fd\x0be\x0cf", "tab\tnew\nline\rcr  spaces", "a" * 101, "b" * 100,
    "x" * 99 + "é", "", "   ", "\n", "İstanbul ΣΟΦΟΣ ǅ ß ﬁ", "\u2028sep\u2029para\u0085nel",
    "a\u0301b \u0301 combining", "U.S.A. don't e-mail $3.50 @home #tag (x) [y] {z}",
    "Ⅻ ① ½ ¼ ²", "\ufffd replacement", "ｆｕｌｌｗｉｄｔｈ", "مرحبا بالعالم",
    "\u3000ideographic\u00a0nbsp",
    "x\u1fefy \u037e", "supercalifragilisticexpialidocious " * 3, "1,234.56e-7 -- ... ?!",
]


def corpus_lines(limit=None):
    """All lines of Brown, or of the shipped corpus without it; `limit` lines are taken
    evenly from every file (the shipped one has KJV and State of the Union shards)."""
    paths = [BROWN] if os.path.exists(BROWN) else sorted(glob.glob(corpus.DEFAULT_CORPUS))
    files = []
    for path in paths:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            files.append(f.read().split("\n"))
    if limit:
        files = [lines[:-(-limit // len(files))] for lines in files]
    return [line for lines in files for line in lines][:limit]


@pytest.fixture(scope="module")
def minilm_vocab(minilm_dir):
    return os.path.join(minilm_dir, "vocab.txt")


@pytest.fixture(scope="module")
def reference(minilm_vocab):
    transformers = pytest.importorskip("transformers")
    return transformers.BertTokenizer(minilm_vocab, do_lower_case=True)


@pytest.fixture(scope="module")
def cased_vocab(tmp_path_factory):
    """A cased WordPiece vocab built with the `tokenizers` trainer (independent of ours)."""
    tokenizers = pytest.importorskip("tokenizers")
    model = tokenizers.Tokenizer(tokenizers.models.WordPiece(unk_token="[UNK]"))
    model.normalizer = tokenizers.normalizers.BertNormalizer(lowercase=False, strip_accents=False)
    model.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
    trainer = tokenizers.trainers.WordPieceTrainer(
        vocab_size=3000, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    text = corpus_lines(5000) + ADVERSARIAL
    model.train_from_iterator(text, trainer)
    path = tmp_path_factory.mktemp("cased") / "vocab.txt"
    vocab = sorted(model.get_vocab().items(), key=lambda kv: kv[1])
    path.write_text("".join(token + "\n" for token, _ in vocab), encoding="utf-8")
    return str(path)


def _assert_same_as_reference(tok, ref, texts):
    ours = [tok.encode(t) for t in texts]
    theirs = ref(texts, add_special_tokens=False, return_offsets_mapping=True,
                 split_special_tokens=True)
    for i, text in enumerate(texts):
        assert ours[i].ids == theirs["input_ids"][i], (text, ours[i].tokens)
        assert ours[i].offsets == [tuple(o) for o in theirs["offset_mapping"][i]], text
        assert ours[i].word_ids == theirs.word_ids(i), text


def test_uncased_matches_transformers_on_adversarial_text(minilm_vocab, reference):
    _assert_same_as_reference(load_tokenizer(minilm_vocab), reference, ADVERSARIAL)


def test_uncased_matches_transformers_on_a_whole_corpus(minilm_vocab, reference):
    tok, lines = load_tokenizer(minilm_vocab), corpus_lines()
    theirs = reference(lines, add_special_tokens=False)["input_ids"]
    mismatched = [line for line, ids in zip(lines, theirs) if tok.encode(line).ids != ids]
    assert not mismatched, mismatched[:3]
    _assert_same_as_reference(tok, reference, lines[:3000])  # offsets and words too


def test_cased_matches_transformers(cased_vocab):
    transformers = pytest.importorskip("transformers")
    ref = transformers.BertTokenizer(cased_vocab, do_lower_case=False)
    tok = load_tokenizer(cased_vocab, do_lower_case=False)
    assert tok.encode("The").tokens == ["The"]
    _assert_same_as_reference(tok, ref, ADVERSARIAL + corpus_lines(10000))


def test_unknown_and_long_words(minilm_vocab):
    tok = load_tokenizer(minilm_vocab)
    assert tok.encode("a" * 101).tokens == ["[UNK]"]
    assert tok.encode("a" * 101).offsets == [(0, 101)]
    assert "[UNK]" not in tok.encode("a" * 100).tokens
    assert tok.encode("unaffable").tokens[1:] and tok.encode("unaffable").tokens[1].startswith("##")


def test_offsets_point_into_original_text():
    tok = load_tokenizer(DEFAULT_VOCAB)
    text = "  Héllo,\u200b WORLD! 日本"
    enc = tok.encode(text)
    for token, (start, end) in zip(enc.tokens, enc.offsets):
        if token == "[UNK]":
            continue
        surface = "".join(c for c in unicodedata.normalize("NFD", text[start:end].lower())
                          if unicodedata.category(c) != "Mn" and c != "\u200b")
        assert surface == token.removeprefix("##")
    assert enc.word_ids == sorted(enc.word_ids)


def test_tf_tokenize_matches_python(minilm_vocab):
    tok = load_tokenizer(minilm_vocab)
    # tensorflow-text applies NFKC case folding (ß -> ss, ﬁ -> fi, Ⅻ -> xii): documented.
    folds_alike = lambda t: unicodedata.normalize("NFKC", t) == t and t.casefold() == t.lower()
    texts = [t for t in ADVERSARIAL if folds_alike(t)] + ["İstanbul ΣΟΦΟΣ"] + corpus_lines(3000)
    assert len(texts) >= len(ADVERSARIAL) - 6 + 3001
    ragged = tok.tf_tokenize(texts).to_list()
    for text, ids in zip(texts, ragged):
        assert ids == tok.encode(text).ids, text


def test_default_vocab_layout():
    tok = load_tokenizer(DEFAULT_VOCAB)
    assert tok.vocab_size == 8192
    assert [tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id] == [0, 1, 2, 3, 4]
    assert tok.id_to_token(5) == "[unused0]"
    assert tok.encode("In the beginning God created").tokens == [
        "in", "the", "beginning", "god", "created"]


def test_save_and_load_round_trip(tmp_path, minilm_vocab):
    tok = load_tokenizer(minilm_vocab, do_lower_case=False)
    tok.save(str(tmp_path))
    again = load_tokenizer(str(tmp_path))
    assert isinstance(again, WordPieceTokenizer) and not again.do_lower_case
    assert again.encode("Hello World").ids == tok.encode("Hello World").ids
    assert load_tokenizer(str(tmp_path / "vocab.txt")).do_lower_case


def test_has_tokenizer_sees_a_saved_tokenizer_only(tmp_path, minilm_vocab):
    assert not has_tokenizer(str(tmp_path))
    (tmp_path / "tokenizer_config.json").write_text("{}")  # a config alone is no tokenizer
    assert not has_tokenizer(str(tmp_path))
    load_tokenizer(minilm_vocab).save(str(tmp_path))
    assert has_tokenizer(str(tmp_path))


def test_clear_errors(tmp_path):
    with pytest.raises(TokenizerError, match="not found"):
        load_tokenizer(str(tmp_path / "missing.txt"))
    no_specials = tmp_path / "vocab.txt"
    no_specials.write_text("[PAD]\n[UNK]\nhello\n")
    with pytest.raises(TokenizerError, match=r"\[CLS\]"):
        load_tokenizer(str(no_specials))
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\ncaf\xe9\n".encode("latin-1"))
    with pytest.raises(TokenizerError, match="UTF-8"):
        load_tokenizer(str(latin1))
    with pytest.raises(TokenizerError, match="not found"):
        SentencePieceTokenizer(str(tmp_path / "none.model"))


@pytest.fixture(scope="module", params=["unigram", "bpe"])
def sentencepiece_dir(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(request.param)
    files = sorted(glob.glob(corpus.DEFAULT_CORPUS))[:1]
    assert data_cli.train_tokenizer_main(["--input", *files, "--vocab_size", "1000", "--type",
                                          request.param, "--output", str(out)]) == 0
    return str(out)


def test_sentencepiece_special_ids_offsets_and_words(sentencepiece_dir):
    tok = load_tokenizer(sentencepiece_dir)
    assert isinstance(tok, SentencePieceTokenizer) and tok.vocab_size == 1000
    assert [tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id] == [0, 1, 2, 3, 4]
    for text in ADVERSARIAL + ["And God said, Let there be light: and there was light."]:
        enc = tok.encode(text)
        assert len(enc.ids) == len(enc.offsets) == len(enc.word_ids)
        for token, (start, end) in zip(enc.tokens, enc.offsets):
            assert 0 <= start <= end <= len(text)
            if token not in ("[UNK]", "\u2581") and text.isascii() and text.isprintable():
                assert text[start:end] == token.lstrip("\u2581")
        starts = [i for i, t in enumerate(enc.tokens) if t.startswith("\u2581")]
        assert all(enc.word_ids[i] == enc.word_ids[i - 1] + 1 for i in starts if i > 0)
    texts = ADVERSARIAL + ["And God said, Let there be light."]
    assert tok.tf_tokenize(texts).to_list() == [tok.encode(t).ids for t in texts]


def test_tokenize_cli(minilm_vocab):
    code = "import sys; from bert_jax import cli; sys.exit(cli.main(['tokenize', *sys.argv[1:]]))"
    run = lambda *args: subprocess.run(
        [sys.executable, "-c", code, "--tokenizer", minilm_vocab, *args],
        input="Hello world!\n\nunaffable\n", capture_output=True, text=True, check=True).stdout
    assert run() == "hello world !\n\n" + " ".join(load_tokenizer(minilm_vocab).encode(
        "unaffable").tokens) + "\n"
    assert run("--ids").splitlines()[0] == "7592 2088 999"
    failed = subprocess.run([sys.executable, "-c", code, "--tokenizer", "/nonexistent/vocab.txt"],
                            input="", capture_output=True, text=True)
    assert failed.returncode == 2 and "not found" in failed.stderr


@pytest.mark.slow
def test_train_wordpiece_cli(tmp_path):
    sample = tmp_path / "sample.txt"
    sample.write_text("\n".join(corpus_lines(1000)))
    assert data_cli.train_tokenizer_main(["--input", str(sample), "--type", "wordpiece",
                                          "--vocab_size", "600", "--output",
                                          str(tmp_path / "wp")]) == 0
    tok = load_tokenizer(str(tmp_path / "wp"))
    assert tok.vocab_size == 600 and tok.id_to_token(4) == "[MASK]"
    assert tok.encode("the jury said").tokens[0] == "the"


def test_encode_ids_fast_path_equals_encode(minilm_vocab, sentencepiece_dir):
    texts = ADVERSARIAL + corpus_lines(2000)
    for tok in (load_tokenizer(minilm_vocab), load_tokenizer(sentencepiece_dir)):
        assert tok.encode_ids(texts) == [tok.encode(t).ids for t in texts]
