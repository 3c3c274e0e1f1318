"""Training a vocabulary: `bert-jax train-tokenizer`.

WordPiece uses tensorflow-text's `bert_vocab_from_dataset` (the learner
Google published for BERT vocabularies); unigram and BPE use SentencePiece.
Both put BERT's special tokens first: [PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3,
[MASK]=4; WordPiece vocabularies also reserve `[unusedN]` slots after them
(as BERT's released vocabularies do) so a fine-tuning run can add tokens.
It lives beside the corpus reader it learns from, so that tokenization reads no corpus.
"""
import logging
import tempfile
from typing import Iterator, Sequence

from bert_jax.data import corpus
from bert_jax.errors import UserError, check_positive
from bert_jax.host import paths
from bert_jax.tokenization import base, wordpiece
from bert_jax.tokenization.sentencepiece_tokenizer import SentencePieceTokenizer
from bert_jax.tokenization.wordpiece import WordPieceTokenizer

log = logging.getLogger(__name__)
NUM_UNUSED = 95  # [unusedN] slots after the special tokens, as BERT's vocabularies have


def _sentences(files: Sequence[str]) -> Iterator[str]:
    stats = corpus.ReadStats()
    for path in files:
        for line in corpus.iter_lines(path, stats):
            if line:
                yield line


def train_wordpiece(files: Sequence[str], vocab_size: int, do_lower_case: bool = True,
                    num_unused: int = NUM_UNUSED) -> WordPieceTokenizer:
    """A WordPiece vocabulary of exactly `vocab_size` tokens (padded with [unusedN])."""
    from bert_jax.host.tf_host import tensorflow
    tf = tensorflow("train-tokenizer --type wordpiece (tensorflow-text's learner; --type "
                    "sentencepiece needs none)")
    from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset as learner
    reserved = list(base.SPECIAL_TOKENS) + [f"[unused{i}]" for i in range(num_unused)]
    dataset = tf.data.Dataset.from_generator(
        lambda: _sentences(files), output_signature=tf.TensorSpec([], tf.string)).batch(1024)
    if do_lower_case:
        # BERT's normalisation, not the learner's NFKC case fold: that would learn ASCII
        # "," and "1" for the full-width "，" and "１" of Chinese text, which then is [UNK].
        dataset = dataset.map(wordpiece.tf_lower_strip_accents)
    learned = learner.bert_vocab_from_dataset(
        dataset, vocab_size=vocab_size, reserved_tokens=reserved,
        bert_tokenizer_params={"lower_case": False},
        # The learner keeps only the 1000 commonest characters by default: too few for
        # Chinese, where each character is a word (People's Daily has ~4,700 of them).
        learn_params={"max_input_tokens": 5_000_000,
                      "max_unique_chars": max(1000, vocab_size // 3)})
    vocab = learned[:vocab_size]
    if vocab_size - len(vocab) > vocab_size // 2:  # the text holds too few distinct pieces
        log.warning("only %d pieces were learned from the text; %d of --vocab_size %d are "
                    "extra [unused] slots: give more text or a smaller --vocab_size",
                    len(vocab) - len(reserved), vocab_size - len(vocab), vocab_size)
    vocab += [f"[unused{i}]" for i in range(num_unused, num_unused + vocab_size - len(vocab))]
    return WordPieceTokenizer(vocab, do_lower_case=do_lower_case)


def train_sentencepiece(files: Sequence[str], vocab_size: int, model_type: str,
                        out_dir: str) -> SentencePieceTokenizer:
    """Trains `out_dir/spm.model`.

    `model_type`: 'unigram' or 'bpe'. `out_dir` is local: the trainer writes only local files."""
    import sentencepiece as spm
    paths.makedirs(out_dir)
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=_sentences(files), model_prefix=paths.join(out_dir, "spm"),
            vocab_size=vocab_size, model_type=model_type, character_coverage=0.9995,
            pad_id=0, unk_id=1, bos_id=-1, eos_id=-1, pad_piece="[PAD]", unk_piece="[UNK]",
            user_defined_symbols=["[CLS]", "[SEP]", "[MASK]"], input_sentence_size=2_000_000,
            shuffle_input_sentence=True, minloglevel=2)
    except RuntimeError as e:  # the trainer's own check of a size that does not fit the text
        if "Vocabulary size" not in str(e):
            raise
        reason = str(e).split("] ", 1)[-1].split(". Increase")[0]
        raise UserError(f"--vocab_size {vocab_size} does not fit this text ({reason})") from None
    return SentencePieceTokenizer(paths.join(out_dir, "spm.model"))


def train_tokenizer(files: Sequence[str], vocab_size: int, kind: str, out_dir: str,
                    do_lower_case: bool = True) -> base.Tokenizer:
    """Trains a tokenizer of `kind` ('wordpiece', 'unigram', 'bpe') and saves it to `out_dir`."""
    check_positive("--vocab_size", vocab_size)
    if kind == "wordpiece" and vocab_size <= len(base.SPECIAL_TOKENS) + NUM_UNUSED:
        raise UserError(f"--vocab_size {vocab_size} leaves no room for pieces learned from the "
                        f"text beside the {len(base.SPECIAL_TOKENS)} special tokens and "
                        f"{NUM_UNUSED} [unused] slots: give at least 1000 (BERT's: 30522)")
    files = corpus.expand_inputs(files)
    corpus.require_text(files)
    if kind == "wordpiece":
        tokenizer = train_wordpiece(files, vocab_size, do_lower_case)
        tokenizer.save(out_dir)
        return tokenizer
    if kind in ("unigram", "bpe"):
        with tempfile.TemporaryDirectory() as tmp:
            tokenizer = train_sentencepiece(files, vocab_size, kind, tmp)
            tokenizer.save(out_dir)
        return SentencePieceTokenizer(paths.join(out_dir, base.SPM_FILE))
    raise UserError(f"unknown tokenizer type {kind!r}: use wordpiece, unigram or bpe")
