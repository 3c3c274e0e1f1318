"""`bert-jax create-data`: BERT-format text -> sharded TFRecords of MLM/NSP examples.

With `--no_next_sentence_prediction` the rows are MLM-only, RoBERTa's FULL-SENTENCES:
[CLS] contiguous sentences [SEP], filled up to max_seq_length, crossing into the next
document of the same input file with a [SEP] between them; all segment 0, no
next_sentence_labels feature (which is how the pipeline tells the two kinds apart).
With `--sentence_order_prediction` the pairs are ALBERT's sentence-order pairs (two
consecutive spans of a document, swapped with p=0.5; see `instances`), labelled in a
`sentence_order_labels` feature (1 = swapped) instead of next_sentence_labels.
short_seq_prob applies to sentence pairs only; each of the dupe_factor copies of an
MLM-only file has the same rows, masked differently.

Each input file is one unit of work, processed by one worker with random
generators derived from (seed, file index, dupe index): the output is
the same for a seed whatever the number of workers, and memory is bounded by
one input file (random next sentences come from other documents of the same
file, so shard big corpora into many files as for the original tool).
Instances of a file are shuffled, then dealt round-robin, in file order, into
the output shards.

Features (BERT's names): input_ids, input_mask, segment_ids (int64 [L]),
next_sentence_labels (int64 [1], 1 = random next; absent in MLM-only files) and, unless
`--dynamic_masking`, masked_lm_positions, masked_lm_ids (int64 [P]) and
masked_lm_weights (float [P]). Files without masks are for dynamic masking;
the pipeline also re-masks statically masked files by restoring their tokens.

Whole-word masking (`--whole_word_masking`) groups `##` pieces into words and
Chinese characters into the words of a segmentation: jieba's
(`--chinese_segmenter`, the default) or a reference file per input file
(`--chinese_ref_file`, BERT-wwm's format: a line of space-separated words per
input line). Its files also carry `word_start` (int64 [L], 1 where a token
starts a word), from which the pipeline's dynamic masking regroups the words.

ERNIE's knowledge masking (`--knowledge_masking entity|phrase`, whole-word masking
implied) masks longer units whole: named entities (jieba.posseg's nr/ns/nt/nz words, or
the leftmost-longest matches of `--entity_file`, one entity per line) or phrases (the
space-separated chunks of `--chinese_ref_file`, words then come from the segmenter).
A unit is the union of the words it touches; words outside units stay units of their
own, so a row mixes entities and words under the same budget. A share
`--knowledge_masking_prob` of the rows is masked by units, the rest by words. Files also
carry `unit_start` (int64 [L]) for the pipeline's dynamic masking.
"""
import argparse
import array
import dataclasses
import itertools
import json
import logging
import multiprocessing
import os
import random
import sys
from typing import List, Optional, Sequence

import numpy as np

from bert_jax import flags
from bert_jax.data import chinese_words, corpus, instances, lengths, masking, tfrecord
from bert_jax.data.options import DataOptions
from bert_jax.errors import UserError
from bert_jax.host import paths, workdir_kind
from bert_jax.tokenization import DEFAULT_VOCAB, chars, load_tokenizer
from bert_jax.tokenization.base import uncovered_text_warning


@dataclasses.dataclass
class Stats:
    """Counts for the summary; summed over files."""
    files: int = 0
    empty_files: int = 0
    single_document_files: int = 0
    documents: int = 0
    one_sentence_documents: int = 0
    sentences: int = 0
    empty_sentences: int = 0
    long_sentences: int = 0
    split_lines: int = 0  # lines over LONG_LINE x max_seq_length characters, split
    split_line_pieces: int = 0  # the sentences (or chunks) they were split into
    bytes: int = 0
    instances: int = 0
    tokens: int = 0
    unknown_tokens: int = 0
    maskable_tokens: int = 0
    masked_tokens: int = 0
    masked_as_mask: int = 0
    masked_unchanged: int = 0
    random_next: int = 0
    random_from_same_document: int = 0
    short_targets: int = 0
    swapped: int = 0
    truncated_instances: int = 0  # sentence pairs that lost tokens to max_seq_length
    knowledge_units: int = 0  # entities or phrases (of 2+ characters) in the sentences
    knowledge_rows: int = 0  # rows masked by knowledge units (the rest by words)
    masked_in_knowledge_units: int = 0  # masked tokens of entities or phrases
    # Tokens per document, for the length percentiles of the summary.
    document_tokens: array.array = dataclasses.field(default_factory=lambda: array.array("q"))

    def __iadd__(self, other: "Stats") -> "Stats":
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))
        return self

    def summary(self) -> dict:
        ratio = lambda a, b: round(a / b, 4) if b else 0.0
        return dict(dataclasses.asdict(self),
                    document_tokens=lengths.percentiles(self.document_tokens),
                    truncated_fraction=ratio(self.truncated_instances, self.instances),
                    masked_fraction=ratio(self.masked_tokens, self.maskable_tokens),
                    mask_token_fraction=ratio(self.masked_as_mask, self.masked_tokens),
                    unchanged_fraction=ratio(self.masked_unchanged, self.masked_tokens),
                    knowledge_row_fraction=ratio(self.knowledge_rows, self.instances),
                    masked_in_knowledge_unit_fraction=ratio(self.masked_in_knowledge_units,
                                                            self.masked_tokens),
                    random_next_fraction=ratio(self.random_next, self.instances),
                    swapped_fraction=ratio(self.swapped, self.instances),
                    short_target_fraction=ratio(self.short_targets, self.instances))


log = logging.getLogger(__name__)

_worker = {}


def _init_worker(vocab: str, do_lower_case: Optional[bool], options: DataOptions):
    if os.environ.get("TF_CPP_MIN_LOG_LEVEL") == "3":  # a quiet parent (bert_jax.cli)
        from bert_jax.host.tf_host import import_quietly
        import_quietly()
    tokenizer = load_tokenizer(vocab, do_lower_case)
    whole_words = options.whole_units
    _worker.update(tokenizer=tokenizer, options=options,
                   word_start=tokenizer.word_start_table() if whole_words else None,
                   segment=chinese_words.make_segmenter(options.chinese_segmenter)
                   if whole_words else None, entities=_entity_finder(options))


def _entity_finder(options: DataOptions):
    if options.knowledge_masking != "entity":
        return None
    if options.entity_file:
        return chinese_words.entity_list(options.entity_file)
    return chinese_words.jieba_entities()


def _read_documents(path: str, ref_path: Optional[str], read: corpus.ReadStats,
                    codec: str) -> list:
    """Documents as lists of (sentence, reference words or None, 'ref_file:line')."""
    if not ref_path:
        return [[(sentence, None, "") for sentence in document]
                for document in corpus.read_documents(path, read, codec)]
    lines = list(corpus.iter_lines(path, read, codec))
    references = list(corpus.iter_lines(ref_path, corpus.ReadStats(), codec))
    while lines and not lines[-1]:
        lines.pop()
    while references and not references[-1]:
        references.pop()
    if len(lines) != len(references):
        raise UserError(f"{ref_path} has {len(references)} lines but {path} has {len(lines)}: "
                        "a reference segmentation needs one line of words per input line")
    numbered = [(line, reference.split(), f"{ref_path}:{number}")
                for number, (line, reference) in enumerate(zip(lines, references), 1)]
    return corpus.split_documents(numbered, read, text=lambda item: item[0])


SUMMARY_FILE = workdir_kind.DATA_SUMMARY  # beside the TFRecords; pretraining reads its vocabulary
_UNIT_TAG = 1 << 24  # ids are below it; see `_encode_sentences`


def _encode_sentences(tokenizer, sentences, segment, entities=None, phrases=False,
                      stats: Optional[Stats] = None) -> List[np.ndarray]:
    """int32 ids per (sentence, words, where); with whole-word masking (`segment` given,
    or reference words) a token that continues a segmented word is stored as -(id + 1):
    the flag then travels with its token through instance building and truncation.
    With knowledge masking (`entities`: text -> entity spans; `phrases`: the reference
    words are phrases) a token that continues a unit is stored as -(id + 1 + 2**24), or
    -(id + 1 + 2**25) when it also continues its word."""
    if segment is None and entities is None and all(words is None for _, words, _ in sentences):
        return [np.asarray(ids, np.int32)
                for ids in tokenizer.encode_ids([s for s, _, _ in sentences])]
    encoded = []
    for sentence, words, where in sentences:
        if (words is None or phrases) and not chinese_words.has_cjk(sentence):
            encoded.append(np.asarray(tokenizer.encode_ids([sentence])[0], np.int32))
            continue
        encoding = tokenizer.encode(sentence)
        units = []
        if phrases:
            units, words = chinese_words.word_spans(sentence, words, where), None
        elif entities is not None:
            units = entities(sentence)
        if words is None and segment is not None:
            words = segment(sentence)
        # No segmentation (chinese_segmenter='none'): characters are the words.
        spans = chinese_words.word_spans(sentence, words, where) if words is not None else []
        ids = np.asarray(encoding.ids, np.int32)
        continues = np.asarray(chinese_words.continues_word(encoding.offsets, spans), bool)
        in_unit = np.asarray(chinese_words.continues_word(encoding.offsets, units), bool)
        if stats is not None:
            stats.knowledge_units += sum(end - start > 1 for start, end in units)
        tag = -ids - 1 - np.where(in_unit, np.where(continues, 2, 1) * _UNIT_TAG, 0)
        encoded.append(np.where(continues | in_unit, tag, ids).astype(np.int32))
    return encoded


def _split_word_flags(rows: dict, word_start_table: np.ndarray,
                      knowledge: bool = False) -> np.ndarray:
    """Restores tagged ids in `rows` (see `_encode_sentences`); returns bool [N, L] word starts
    and stores them as rows['word_start'] (and, with `knowledge` masking, the units' starts
    as rows['unit_start'])."""
    tagged = rows["input_ids"] < 0
    value = np.where(tagged, -rows["input_ids"] - 1, 0)
    kind = value // _UNIT_TAG  # 0: continues a word; 1: a unit; 2: both
    rows["input_ids"] = np.where(tagged, value % _UNIT_TAG, rows["input_ids"])
    word_start = word_start_table[rows["input_ids"]] & ~(tagged & (kind != 1))
    rows["word_start"] = word_start.astype(np.int32)
    if knowledge:
        rows["unit_start"] = (word_start & ~(tagged & (kind > 0))).astype(np.int32)
    return word_start


def _knowledge_masking_units(rows: dict, word_start: np.ndarray, keys: np.ndarray,
                             options: DataOptions, stats: Optional[Stats] = None) -> np.ndarray:
    """The units to mask whole per row: knowledge units in a share of the rows
    (`masking.knowledge_rows`), words elsewhere; counts them in `stats`."""
    if "unit_start" not in rows:
        return word_start
    use = masking.knowledge_rows(keys, options.knowledge_masking_prob)
    if stats is not None:
        stats.knowledge_rows = int(use.sum())
    return np.where(use[:, None], rows["unit_start"].astype(bool), word_start)


def _in_knowledge_units(tagged_ids: np.ndarray) -> np.ndarray:
    """bool [N, L]: the tokens of entities or phrases (of 2+ tokens), from the tagged ids
    (see `_encode_sentences`): those continuing a unit and the ones each starts from."""
    continues = (tagged_ids < 0) & ((-tagged_ids - 1) // _UNIT_TAG > 0)
    return continues | np.pad(continues[:, 1:], ((0, 0), (0, 1)))


LONG_LINE = 8  # a line of more than 8 x max_seq_length characters is split into sentences


def _split_long_lines(sentences: list, max_seq_length: int, stats: Stats) -> list:
    """(sentence, words, where) items, a line over LONG_LINE x max_seq_length characters
    (a paragraph, or a file without newlines) replaced by its sentences, or chunks of
    max_seq_length - 3 characters (`corpus.split_long_line`): kept whole, in linear time,
    rather than truncated to one row. Lines with reference words stay as they are."""
    if all(len(text) <= LONG_LINE * max_seq_length for text, _, _ in sentences):
        return sentences
    out = []
    for text, words, where in sentences:
        if words is not None or len(text) <= LONG_LINE * max_seq_length:
            out.append((text, words, where))
            continue
        pieces = corpus.split_long_line(text, max_seq_length - 3)
        stats.split_lines += 1
        stats.split_line_pieces += len(pieces)
        out.extend((piece, None, where) for piece in pieces)
    return out


def _tokenize_documents(path: str, ref_path: Optional[str], stats: Stats):
    tokenizer, options = _worker["tokenizer"], _worker["options"]
    read = corpus.ReadStats()
    documents = []
    for raw_document in _read_documents(path, ref_path, read, options.encoding):
        raw_document = _split_long_lines(raw_document, options.max_seq_length, stats)
        document = []
        for ids in _encode_sentences(tokenizer, raw_document, _worker["segment"],
                                     _worker["entities"],
                                     options.knowledge_masking == "phrase", stats):
            stats.empty_sentences += len(ids) == 0
            stats.long_sentences += len(ids) > options.max_seq_length - 3
            if len(ids):
                document.append(ids)
        if document:
            documents.append(document)
            stats.document_tokens.append(sum(len(ids) for ids in document))
            stats.one_sentence_documents += len(document) == 1
            stats.sentences += len(document)
    stats.files += read.files
    stats.empty_files += read.empty_files
    stats.bytes += read.bytes
    stats.documents += len(documents)
    stats.single_document_files += len(documents) == 1
    return documents


def _make_rows(documents, options: DataOptions, tokenizer, seed: str, rng: random.Random,
               stats: Stats):
    """(instances, row dict) for the documents of one unit of work, dupe_factor times,
    shuffled with `rng`: NSP pairs (dupe d drawn with the generator `seed/d`), or
    full-sentence rows without NSP."""
    if not options.next_sentence_prediction:
        made = instances.full_sentence_rows(documents, options.max_seq_length,
                                            tokenizer.sep_id) if documents else []
        made = made * options.dupe_factor
        rng.shuffle(made)
        stats.instances = len(made)
        return made, instances.pack_full_sentence_rows(made, options.max_seq_length,
                                                       tokenizer.cls_id, tokenizer.sep_id)
    made = []
    counts = instances.InstanceStats()
    for dupe in range(options.dupe_factor if documents else 0):
        dupe_rng = random.Random(f"{seed}/{dupe}")
        for index in range(len(documents)):
            made.extend(instances.instances_from_document(
                documents, index, options.max_seq_length, options.short_seq_prob, dupe_rng,
                counts, options.sentence_order_prediction))
    rng.shuffle(made)
    stats.instances, stats.random_next = counts.instances, counts.random_next
    stats.short_targets, stats.swapped = counts.short_targets, counts.swapped
    stats.truncated_instances = counts.truncated
    stats.random_from_same_document = counts.random_from_same_document
    rows = instances.pack_instances(made, options.max_seq_length, tokenizer.cls_id,
                                    tokenizer.sep_id) if made else {}
    if made and options.sentence_order_prediction:  # the feature names the task
        rows["sentence_order_labels"] = rows.pop("next_sentence_labels")
    return made, rows


def process_file(task) -> tuple:
    """One input file -> (serialized tf.train.Examples in output order, Stats)."""
    file_index, path, ref_path = task
    tokenizer, options = _worker["tokenizer"], _worker["options"]
    stats = Stats()
    documents = _tokenize_documents(path, ref_path, stats)
    seed = f"{options.seed}/{file_index}"
    rng = random.Random(f"{seed}/shuffle")  # then draws the masks' keys
    made, rows = _make_rows(documents, options, tokenizer, seed, rng, stats)
    if not made:
        return [], stats
    word_start = None
    in_units = _in_knowledge_units(rows["input_ids"])
    if options.whole_units:
        word_start = _split_word_flags(rows, _worker["word_start"],
                                       options.knowledge_masking != "none")
    stats.tokens = int(rows["input_mask"].sum())
    stats.unknown_tokens = int(((rows["input_ids"] == tokenizer.unk_id)
                                & (rows["input_mask"] > 0)).sum())
    specials = (rows["input_ids"] == tokenizer.cls_id) | (rows["input_ids"] == tokenizer.sep_id)
    stats.maskable_tokens = stats.tokens - int((specials & (rows["input_mask"] > 0)).sum())
    if not options.dynamic_masking:
        unmasked = rows["input_ids"]
        keys = np.array([rng.getrandbits(64) for _ in made], np.uint64)
        units = _knowledge_masking_units(rows, word_start, keys, options, stats) \
            if word_start is not None else None
        rows.update(masking.mask_batch(
            unmasked, rows["input_mask"], keys, vocab_size=tokenizer.vocab_size,
            mask_id=tokenizer.mask_id, cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id,
            max_predictions=options.max_predictions_per_seq,
            masked_lm_prob=options.masked_lm_prob, word_start=units))
        weights = rows["masked_lm_weights"] > 0
        stats.masked_in_knowledge_units = int((weights & np.take_along_axis(
            in_units, rows["masked_lm_positions"], 1)).sum())
        at_positions = np.take_along_axis(rows["input_ids"], rows["masked_lm_positions"], 1)
        stats.masked_tokens = int(weights.sum())
        stats.masked_as_mask = int((weights & (at_positions == tokenizer.mask_id)).sum())
        stats.masked_unchanged = int((weights & (at_positions == rows["masked_lm_ids"])).sum())
    return serialize_examples(rows), stats


def examples_from_texts(documents: Sequence[Sequence[str]], tokenizer, options: DataOptions,
                        seed: int = 0) -> dict:
    """Masked MLM/NSP examples for in-memory documents (lists of sentences), no files.

    For tests and small runs. Returns the pipeline's unpacked keys: input_ids,
    input_mask, segment_ids int32 [N, L]; masked_lm_positions, masked_lm_ids
    int32 [N, P]; masked_lm_weights float32 [N, P]; next_sentence_labels int32 [N]
    (SOP's with sentence_order_prediction; not without NSP; and word_start int32 [N, L]
    with whole-word masking, unit_start int32 [N, L] with knowledge masking).
    """
    _check_knowledge_masking(options, references=False)  # phrases need chunking files
    segment = chinese_words.make_segmenter(options.chinese_segmenter) \
        if options.whole_units else None
    entities = _entity_finder(options)
    tokenized = [[ids for ids in _encode_sentences(tokenizer, [(s, None, "") for s in doc],
                                                   segment, entities) if len(ids)]
                 for doc in documents]
    tokenized = [doc for doc in tokenized if doc]
    if not tokenized:
        raise UserError("no text to make examples from")
    rng = random.Random(f"{seed}/texts")
    if options.next_sentence_prediction:
        made, counts = [], instances.InstanceStats()
        for _ in range(options.dupe_factor):
            for index in range(len(tokenized)):
                made.extend(instances.instances_from_document(
                    tokenized, index, options.max_seq_length, options.short_seq_prob, rng,
                    counts, options.sentence_order_prediction))
        rows = instances.pack_instances(made, options.max_seq_length, tokenizer.cls_id,
                                        tokenizer.sep_id)
    else:
        made = instances.full_sentence_rows(tokenized, options.max_seq_length,
                                            tokenizer.sep_id) * options.dupe_factor
        rows = instances.pack_full_sentence_rows(made, options.max_seq_length,
                                                 tokenizer.cls_id, tokenizer.sep_id)
    keys = np.array([rng.getrandbits(64) for _ in made], np.uint64)
    word_start = _split_word_flags(rows, tokenizer.word_start_table(),
                                   options.knowledge_masking != "none") \
        if options.whole_units else None
    rows.update(masking.mask_batch(
        rows["input_ids"], rows["input_mask"], keys, vocab_size=tokenizer.vocab_size,
        mask_id=tokenizer.mask_id, cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id,
        max_predictions=options.max_predictions_per_seq, masked_lm_prob=options.masked_lm_prob,
        word_start=_knowledge_masking_units(rows, word_start, keys, options)
        if word_start is not None else None))
    return rows


def serialize_examples(rows: dict) -> List[bytes]:
    """Row dicts of numpy arrays ([N, ...] each) -> serialized tf.train.Examples."""
    from tensorflow.core.example import example_pb2
    serialized = []
    for i in range(len(rows["input_ids"])):
        example = example_pb2.Example()
        feature = example.features.feature
        for name, values in rows.items():
            if name == "masked_lm_weights":
                feature[name].float_list.value.extend(values[i].tolist())
            else:
                feature[name].int64_list.value.extend(np.atleast_1d(values[i]).tolist())
        # Map entries in key order: otherwise the byte order varies between processes.
        serialized.append(example.SerializeToString(deterministic=True))
    return serialized


def shard_paths(output_dir: str, num_shards: int) -> List[str]:
    return [paths.join(output_dir, f"pretrain-{i:05d}-of-{num_shards:05d}.tfrecord")
            for i in range(num_shards)]


def _check_knowledge_masking(options: DataOptions, references: bool) -> None:
    if not 0 <= options.knowledge_masking_prob <= 1:
        raise UserError(f"knowledge_masking_prob {options.knowledge_masking_prob} is not "
                        "in [0, 1]")
    if options.knowledge_masking == "phrase" and not references:
        raise UserError("--knowledge_masking phrase masks the chunks of a reference "
                        "chunking file: give one per input file with --chinese_ref_file")
    if options.entity_file and options.knowledge_masking != "entity":
        raise UserError("--entity_file lists entities for --knowledge_masking entity")
    _entity_finder(options)  # a missing or empty entity list fails here, before any work


def _cjk_share(path: str, codec: str, lines: int = 1000) -> float:
    """The CJK share of the first `lines` lines of `path` (for the [UNK] warning)."""
    return chars.cjk_share(itertools.islice(corpus.iter_lines(path, corpus.ReadStats(), codec),
                                            lines))


def _check_options(options: DataOptions) -> None:
    if options.max_seq_length < 5:
        raise UserError("max_seq_length must be at least 5")


def _text_files(inputs: Sequence[str], codec: str) -> List[str]:
    """The input files, all text (a TFRecord among them is refused, named), some not blank."""
    files = corpus.expand_inputs(inputs)
    for path in files:
        if tfrecord.is_tfrecord_file(path):
            raise UserError(f"{path} is a TFRecord file (pretraining data already), not "
                            "text: give create-data text files, and pretrain on TFRecords")
    corpus.require_text(files, codec)
    return files


def _warn_about(total: Stats, files: Sequence[str], options: DataOptions) -> None:
    """The run's warnings, once each: text the vocabulary does not cover, long lines."""
    warning = uncovered_text_warning(total.unknown_tokens, total.tokens,
                                     f"{len(files)} input file(s)",
                                     _cjk_share(files[0], options.encoding))
    if warning:
        log.warning(warning)
    if total.split_lines:
        log.warning(f"{total.split_lines} line(s) longer than "
                    f"{LONG_LINE * options.max_seq_length} characters were split into "
                    f"{total.split_line_pieces} sentences or chunks "
                    "(BERT's format is a sentence per line, a blank line between documents)")


def create_pretraining_data(inputs: Sequence[str], output_files: Sequence[str], vocab: str,
                            options: DataOptions, do_lower_case: Optional[bool] = None,
                            num_workers: int = 1, progress: bool = True,
                            chinese_ref_files: Sequence[str] = ()) -> Stats:
    """Writes `output_files` (one per shard) and returns the summed Stats.

    `chinese_ref_files`: reference segmentations for whole-word masking, one per
    input file in the sorted order of the expanded inputs. Fails at once
    (FileNotFoundError / TokenizerError / UserError) for a missing input,
    vocabulary or reference file, and for bytes that are not UTF-8 (`bert_jax.host.encoding`);
    empty files and long lines are counted; a reference line that does not spell its
    input line fails.
    """
    from tqdm import tqdm
    _check_options(options)
    files = _text_files(inputs, options.encoding)
    load_tokenizer(vocab, do_lower_case)  # fail before starting workers
    chinese_words.make_segmenter(options.chinese_segmenter)
    references = corpus.expand_inputs(chinese_ref_files) if chinese_ref_files else []
    if references and not options.whole_units:
        raise UserError("a Chinese reference segmentation is for whole-word masking: "
                        "add --whole_word_masking")
    _check_knowledge_masking(options, bool(references))
    if references and len(references) != len(files):
        raise UserError(f"{len(references)} reference files for {len(files)} input files: "
                        "give one per input file, in the inputs' sorted order")
    tasks = [(index, path, references[index] if references else None)
             for index, path in enumerate(files)]
    made = sorted({paths.dirname(paths.abspath(p)) for p in output_files
                   if not paths.exists(paths.dirname(paths.abspath(p)))})
    for directory in made:
        paths.makedirs(directory)
    # Shards are written under temporary (hidden) names, renamed when all are complete:
    # a killed run leaves no file a later glob could take as data, and an earlier
    # run's shards stay whole until then.
    temporary = [paths.temporary_sibling(path) for path in output_files]
    writers = [tfrecord.RecordWriter(path) for path in temporary]
    bar = tqdm(total=sum(paths.getsize(f) for f in files), unit="B", unit_scale=True,
               desc="create-data", disable=not progress, file=sys.stderr)
    total, written = Stats(), 0
    pool = None
    if num_workers > 1 and len(files) > 1:
        # spawn, not fork: this process may already run TensorFlow's (or JAX's) threads.
        pool = multiprocessing.get_context("spawn").Pool(
            min(num_workers, len(files)), _init_worker, (vocab, do_lower_case, options))
        results = pool.imap(process_file, tasks)
    else:
        _init_worker(vocab, do_lower_case, options)
        results = map(process_file, tasks)
    failed = True
    try:
        for (_, path, _), (serialized, stats) in zip(tasks, results):
            for record in serialized:
                writers[written % len(writers)].write(record)
                written += 1
            total += stats
            bar.update(paths.getsize(path))
        failed = False
    finally:
        if pool is not None:
            pool.terminate()
        for writer in writers:
            writer.close()
        bar.close()
        if failed or not written:  # partial shards would pass for complete ones
            _remove_outputs(temporary, made)
    _warn_about(total, files, options)
    if not written:  # empty shards would only fail later, in the pipeline
        raise UserError(
            f"no pretraining examples from {len(files)} input file(s): {total.documents} "
            f"documents, {total.sentences} sentences, {total.empty_files} empty file(s); "
            "the input needs text in BERT's "
            "format (a sentence per line, a blank line between documents)")
    for tmp, path in zip(temporary, output_files):
        paths.move(tmp, path)
    return total


def _remove_outputs(output_files: Sequence[str], made: Sequence[str]) -> None:
    """Removes the shards of a failed run and the directories it made."""
    for path in output_files:
        if paths.exists(path):
            paths.remove(path)
    for directory in made:
        if paths.exists(directory) and not paths.listdir(directory):
            paths.rmtree(directory)


def remove_stale_shards(output_dir: str, output_files: Sequence[str]) -> List[str]:
    """Removes the shards an earlier run with another --num_shards left in `output_dir`
    (`pretrain-*-of-*.tfrecord` that this run did not write): a glob over the directory
    would train on both sets. Returns their paths."""
    keep = {paths.abspath(p) for p in output_files}
    stale = [p for p in paths.glob(paths.join(output_dir, "pretrain-*-of-*.tfrecord"))
             if paths.abspath(p) not in keep]
    for path in stale:
        paths.remove(path)
    return stale


_BOOLEAN_HELP = {
    "whole_word_masking": "mask whole words (Chinese words from --chinese_segmenter or "
                          "--chinese_ref_file)",
    "dynamic_masking": "write unmasked examples: pretraining with dynamic_masking=True masks "
                       "them anew every epoch",
    "next_sentence_prediction": "sentence pairs with next-sentence labels (default); "
                                "--no_next_sentence_prediction: MLM-only rows of contiguous "
                                "sentences (RoBERTa's FULL-SENTENCES)",
    "sentence_order_prediction": "ALBERT's sentence-order pairs (consecutive spans, swapped "
                                 "with p=0.5) instead of next-sentence pairs",
}


def _parse_args(argv: List[str]) -> argparse.Namespace:
    parser = flags.ArgumentParser(prog="bert-jax create-data", description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter,
                                  deprecated={"--output_dir": "--output", "--vocab": "--tokenizer",
                                              "--no_static_masking": "--dynamic_masking"})
    parser.add_argument("--input", nargs="+", default=[corpus.DEFAULT_CORPUS],
                        help="text files or globs; default: the embedded corpus")
    parser.add_argument("--output", required=True, help="folder of the TFRecord shards")
    parser.add_argument("--tokenizer", default=DEFAULT_VOCAB,
                        help="tokenizer directory, vocab.txt or .model; default: embedded vocab")
    case = parser.add_mutually_exclusive_group()
    case.add_argument("--do_lower_case", dest="do_lower_case", action="store_true", default=None)
    case.add_argument("--cased", dest="do_lower_case", action="store_false")
    for name, default in DataOptions().create_data_fields().items():
        if isinstance(default, bool):  # --KEY / --no_KEY, as the pretraining config spells it
            parser.add_argument(f"--{name}", action=flags.BooleanOptionalAction,
                                default=default, help=_BOOLEAN_HELP[name])
            continue
        parser.add_argument(f"--{name}", type=type(default), default=default,
                            **({"choices": chinese_words.SEGMENTERS}
                               if name == "chinese_segmenter" else
                               {"choices": chinese_words.KNOWLEDGE_MASKING}
                               if name == "knowledge_masking" else {}))
    parser.add_argument("--chinese_ref_file", nargs="+", default=[],
                        help="whole-word masking: reference segmentations (a line of "
                        "space-separated words per input line), one per input file")
    parser.add_argument("--num_shards", type=int, default=4)
    parser.add_argument("--num_workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--no_progress", action="store_true")
    return parser.parse_args(argv)


def _options(args: argparse.Namespace) -> DataOptions:
    return DataOptions(**{name: getattr(args, name) for name in DataOptions().create_data_fields()})


def run(args, options: DataOptions, output_files: List[str], summary_dir: Optional[str]) -> None:
    """Shared by `main` and tools/create_pretraining_data.py: runs, prints, saves the summary."""
    stats = create_pretraining_data(args.input, output_files, args.tokenizer, options,
                                    args.do_lower_case, args.num_workers,
                                    progress=not getattr(args, "no_progress", False),
                                    chinese_ref_files=getattr(args, "chinese_ref_file", []))
    summary = dict(stats.summary(), options=options.create_data_fields(),
                   # pretraining refuses records made with another setup
                   record_setup=options.record_setup(),
                   vocab=paths.abspath(args.tokenizer), output_files=list(output_files),
                   # pretraining refuses records made with another vocabulary
                   vocab_fingerprint=load_tokenizer(args.tokenizer,
                                                    args.do_lower_case).fingerprint())
    for key, value in stats.summary().items():
        if isinstance(value, dict):  # percentiles
            value = ", ".join(f"{k} {v}" for k, v in value.items())
        print(f"{key:>28}: {value}")
    if summary_dir:
        paths.write_text(paths.join(summary_dir, SUMMARY_FILE), json.dumps(summary, indent=2))


def _check_output_dir(output_dir: str) -> None:
    """The shards go into a data folder, never among a training run's or a model's files."""
    kind = workdir_kind.kind_of(output_dir)
    if kind not in (None, workdir_kind.DATA):
        raise UserError(f"--output {output_dir} holds a {kind} run "
                        f"({workdir_kind.COMMANDS[kind]}): write the TFRecords into a folder "
                        "of their own")


def main(argv: List[str]) -> int:
    args = _parse_args(argv)
    output_files = shard_paths(args.output, args.num_shards)
    options = _options(args)
    _check_output_dir(args.output)
    run(args, options, output_files, args.output)
    stale = remove_stale_shards(args.output, output_files)
    if stale:
        print(f"removed {len(stale)} shard(s) of an earlier run from {args.output} "
              f"(written with another --num_shards)", file=sys.stderr)
    return 0
