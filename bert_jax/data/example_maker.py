"""create-data's worker.

One input file -> its serialized tf.train.Examples and Stats (tokenizing, building instances,
masking; see `create_pretraining_data` for the format), and `examples_from_texts` for in-memory
documents. Imports no TensorFlow."""
import random
import signal
from typing import List, Optional, Sequence

import numpy as np

from bert_jax.data import chinese_words, corpus, instances, masking, shard_parts, tfds_source
from bert_jax.data.data_stats import Stats
from bert_jax.data.example_proto import serialize_examples
from bert_jax.data.options import DataOptions
from bert_jax.errors import UserError
from bert_jax.tokenization import load_tokenizer

_worker = {}


def init_worker(vocab: str, do_lower_case: Optional[bool], options: DataOptions,
                ignore_interrupts: bool = False):
    """Loads what `process_file` needs into this process.

    `ignore_interrupts`: in a pool's workers, which the parent ends itself on Ctrl-C
    (no traceback from each) and with SIGTERM, which must kill them (a forked worker inherits the
    parent's stop handler)."""
    if ignore_interrupts:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
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


def read_input_documents(path: str, ref_path: Optional[str], read: corpus.ReadStats,
                   codec: str) -> list:
    """The one place documents are read.

    An input (a text file) -> documents as lists of (sentence, reference words or None,
    'ref_file:line'); `read` counts files and bytes. `path` may be a piece of a tfds corpus
    (`tfds_source`)."""
    if tfds_source.is_tfds(path):
        return [[(sentence, None, "") for sentence in document]
                for document in tfds_source.read_piece(path, read)]
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


_UNIT_TAG = 1 << 24  # ids are below it; see `_encode_sentences`


def _encode_sentences(tokenizer, sentences, segment, entities=None, phrases=False,
                      stats: Optional[Stats] = None) -> List[np.ndarray]:
    """int32 ids per (sentence, words, where).

    With whole-word masking (`segment` given, or reference words) a token that continues a segmented
    word is stored as -(id + 1): the flag then travels with its token through instance building and
    truncation. With knowledge masking (`entities`: text -> entity spans; `phrases`: the reference
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
    """Restores tagged ids in `rows` (see `_encode_sentences`).

    Returns bool [N, L] word starts and stores them as rows['word_start'] (and, with `knowledge`
    masking, the units' starts as rows['unit_start'])."""
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
    """The units to mask whole per row.

    Knowledge units in a share of the rows (`masking.knowledge_rows`), words elsewhere; counts them
    in `stats`."""
    if "unit_start" not in rows:
        return word_start
    use = masking.knowledge_rows(keys, options.knowledge_masking_prob)
    if stats is not None:
        stats.knowledge_rows = int(use.sum())
    return np.where(use[:, None], rows["unit_start"].astype(bool), word_start)


def _in_knowledge_units(tagged_ids: np.ndarray) -> np.ndarray:
    """bool [N, L]: the tokens of entities or phrases (of 2+ tokens), from the tagged ids.

    See `_encode_sentences`: those continuing a unit and the ones each starts from."""
    continues = (tagged_ids < 0) & ((-tagged_ids - 1) // _UNIT_TAG > 0)
    return continues | np.pad(continues[:, 1:], ((0, 0), (0, 1)))


LONG_LINE = 8  # a line of more than 8 x max_seq_length characters is split into sentences


def _split_long_lines(sentences: list, max_seq_length: int, stats: Stats) -> list:
    """(sentence, words, where) items, with over-long lines split.

    A line over LONG_LINE x max_seq_length characters (a paragraph, or a file without newlines) is
    replaced by its sentences, or chunks of max_seq_length - 3 characters
    (`corpus.split_long_line`): kept whole, in linear time, rather than truncated to one row. Lines
    with reference words stay as they are."""
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
    for raw_document in read_input_documents(path, ref_path, read, options.encoding):
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
    """(instances, row dict) for the documents of one unit of work.

    They are made dupe_factor times, shuffled with `rng`: NSP pairs (dupe d drawn with the generator
    `seed/d`), or full-sentence rows without NSP."""
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


def check_knowledge_masking(options: DataOptions, references: bool) -> None:
    if not 0 <= options.knowledge_masking_prob <= 1:
        raise UserError(f"knowledge_masking_prob {options.knowledge_masking_prob} is not "
                        "in [0, 1]")
    if options.knowledge_masking == "phrase" and not references:
        raise UserError("--knowledge_masking phrase masks the chunks of a reference "
                        "chunking file: give one per input file with --chinese_ref_file")
    if options.entity_file and options.knowledge_masking != "entity":
        raise UserError("--entity_file lists entities for --knowledge_masking entity")
    _entity_finder(options)  # a missing or empty entity list fails here, before any work


def examples_from_texts(documents: Sequence[Sequence[str]], tokenizer, options: DataOptions,
                        seed: int = 0) -> dict:
    """Masked MLM/NSP examples for in-memory documents (lists of sentences), no files.

    For tests and small runs. Returns the pipeline's unpacked keys: input_ids,
    input_mask, segment_ids int32 [N, L]; masked_lm_positions, masked_lm_ids
    int32 [N, P]; masked_lm_weights float32 [N, P]; next_sentence_labels int32 [N]
    (SOP's with sentence_order_prediction; not without NSP; and word_start int32 [N, L]
    with whole-word masking, unit_start int32 [N, L] with knowledge masking).
    """
    check_knowledge_masking(options, references=False)  # phrases need chunking files
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


def convert_file(task: tuple) -> dict:
    """One input file -> its part (`shard_parts.write_part`).

    `task`: (index, path, reference path or None, parts folder, number of shards, JSON to record
    with it). Returns the part's JSON, the file's Stats under 'stats'."""
    index, path, ref_path, parts_dir, num_shards, meta = task
    records, stats = process_file((index, path, ref_path))
    return shard_parts.write_part(records, parts_dir, index, num_shards,
                                  dict(meta, stats=stats.to_json()))
