"""Tokenizer files of each encoder family, written the way each family ships them."""

import functools
import json
import os

LINES = [
    "Hello world! This is a test.",
    "  leading spaces and   multiple   spaces inside",
    "Café naïve résumé façade Ångström über straße",
    "中文字符测试，还有日本語のテキスト。",
    "emoji 😀🎉 and symbols © ™ → ∞",
    "Supercalifragilisticexpialidocious" * 4,
    "",
    "tabs\tand\nnewlines",
    "numbers 3.14159, 1,000,000 and dates 2026-11-28",
    "Mixed CASE Words With Ümlauts",
    "The quick brown fox jumps over the lazy dog.",
]

_SYLLABLES = "ka lo mi ne su ta ri po ve da gu ze an er on in es el".split()


CORPUS = LINES * 5 + [" ".join(_SYLLABLES[(i * 7 + j * 3) % 18] + _SYLLABLES[(i + j * j) % 18]
                               + _SYLLABLES[(i * j) % 18][: 1 + j % 2] for j in range(12))
                      for i in range(300)]


def _write(folder, name, value):
    with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
        f.write(value if isinstance(value, str) else json.dumps(value))


def _byte_level_bpe():
    from tokenizers import ByteLevelBPETokenizer
    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator(CORPUS, vocab_size=400, min_frequency=1,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    return tok


@functools.lru_cache(maxsize=None)
def _unigram_model() -> bytes:
    """A SentencePiece unigram model of the test text (XLM-R's and CamemBERT's kind)."""
    import tempfile

    import sentencepiece as spm
    with tempfile.TemporaryDirectory() as folder:
        prefix = os.path.join(folder, "spm")
        spm.SentencePieceTrainer.train(sentence_iterator=iter(CORPUS), model_prefix=prefix,
                                       vocab_size=200, model_type="unigram",
                                       character_coverage=1.0, bos_id=1, eos_id=2, unk_id=0,
                                       pad_id=-1, minloglevel=2)
        with open(prefix + ".model", "rb") as f:
            return f.read()


def family_files(family: str, folder) -> None:
    """Writes only `family`'s own tokenizer files into the (existing) `folder`."""
    folder = str(folder)
    if family in ("roberta", "roberta-json"):  # vocab.json + merges.txt; tokenizer.json
        import tempfile
        with tempfile.TemporaryDirectory() as plain:
            target = plain if family == "roberta-json" else folder
            _byte_level_bpe().save_model(target)
            _write(target, "tokenizer_config.json", {"tokenizer_class": "RobertaTokenizer"})
            if family == "roberta-json":
                import transformers

                transformers.AutoTokenizer.from_pretrained(plain).save_pretrained(folder)
    elif family in ("xlm-roberta", "camembert"):  # fairseq's ids on a SentencePiece model
        with open(os.path.join(folder, "sentencepiece.bpe.model"), "wb") as f:
            f.write(_unigram_model())
        cls = "XLMRobertaTokenizer" if family == "xlm-roberta" else "CamembertTokenizer"
        _write(folder, "tokenizer_config.json", {"tokenizer_class": cls})
    elif family in ("distilbert", "electra"):  # WordPiece vocab.txt, as BERT
        from tokenizers import BertWordPieceTokenizer
        wordpiece = BertWordPieceTokenizer(lowercase=True)
        wordpiece.train_from_iterator(CORPUS, vocab_size=300, min_frequency=1)
        wordpiece.save_model(folder)
        cls = "DistilBertTokenizer" if family == "distilbert" else "ElectraTokenizer"
        _write(folder, "tokenizer_config.json", {"tokenizer_class": cls, "do_lower_case": True})
    else:
        write_eurobert_like(folder)


def write_eurobert_like(folder):
    """A Llama-3-like tokenizer.json as EuroBERT's: byte-level BPE behind a regex split,
    `<|begin_of_text|> A <|end_of_text|>` rows, `<|mask|>`, no unknown token."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|"
                                   r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|"
                                   r"\s+"), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|mask|>", "<|pad|>"]
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    bos, eos = tok.token_to_id(specials[0]), tok.token_to_id(specials[1])
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A <|end_of_text|>",
        pair="<|begin_of_text|> $A <|end_of_text|> $B:1 <|end_of_text|>:1",
        special_tokens=[(specials[0], bos), (specials[1], eos)])
    tok.save(os.path.join(folder, "tokenizer.json"))
    _write(folder, "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": specials[0],
        "eos_token": specials[1], "mask_token": specials[2], "pad_token": specials[3]})


def bpe_tokenizer_json(path, vocab_size=128):
    """A byte-level BPE tokenizer.json with BERT's special tokens, filled up to
    `vocab_size` with unused tokens (ModernBERT's kind: 50368 ids, 83 of them unused)."""
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(["the cat sat on the mat", "a dog ran far away"] * 10,
                            trainers.BpeTrainer(vocab_size=vocab_size - 10, special_tokens=[
                                "[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]))
    unused = vocab_size - tok.get_vocab_size(with_added_tokens=True)
    tok.add_special_tokens([AddedToken(f"[unused{i}]", special=True) for i in range(unused)])
    assert tok.get_vocab_size(with_added_tokens=True) == vocab_size
    tok.save(str(path))
