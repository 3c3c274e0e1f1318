"""Pretraining rows from tokenized documents.

Next-sentence-prediction pairs (BERT's rules), sentence-order pairs (ALBERT's SOP) or, without
either, rows of contiguous sentences (`full_sentence_rows`).

Per document, sentences accumulate until a target length (max_seq_length - 3,
or with probability short_seq_prob a length uniform in [2, that]); the chunk
is split at a random sentence boundary into A and B; with p=0.5 (always when
the chunk is a single sentence) B is replaced by text from a random other
document of the same input file and the unused sentences are put back; the
pair is truncated by dropping tokens of the longer side from the front or
back at random.

Two deliberate changes, both so the advertised rates hold: BERT draws the
short target once per *document*, we draw it per instance, so the share of
short instances is short_seq_prob however long the documents are; and BERT
forces a random B whenever the chunk is a single sentence (frequent with
short targets, which pushed random-next to ~52%), we take the actual next
sentence as B when the coin says so and the document has one, so only a
document's last lone sentence forces a random B.

Sentence-order prediction (`sentence_order=True`, ALBERT): B is always the text that
follows A in its document, and with p=0.5 the two are swapped (label 1). A chunk of one
sentence takes the next sentence as B; a document's last lone sentence is split at a
random token (one of a single token makes no instance).
"""
import dataclasses
import random
from typing import List, Sequence

import numpy as np


@dataclasses.dataclass
class Instance:
    tokens_a: List[int]
    tokens_b: List[int]
    is_random_next: bool
    short_target: bool
    swapped: bool = False  # sentence-order pairs: B came first in the document


@dataclasses.dataclass
class InstanceStats:
    instances: int = 0
    random_next: int = 0
    short_targets: int = 0
    random_from_same_document: int = 0
    swapped: int = 0
    truncated: int = 0  # pairs that lost tokens to max_seq_length


def _truncate_pair(tokens_a: list, tokens_b: list, max_tokens: int,
                   rng: random.Random) -> bool:
    """Drops tokens from the longer side, at its front or back (p=0.5), in place.

    Returns whether it dropped any. Counts the drops first: linear in the pair's length."""
    lengths, drops = [len(tokens_a), len(tokens_b)], [[0, 0], [0, 0]]  # [front, back]
    while sum(lengths) > max_tokens:
        longer = 0 if lengths[0] > lengths[1] else 1
        drops[longer][0 if rng.random() < 0.5 else 1] += 1
        lengths[longer] -= 1
    for tokens, (front, back) in ((tokens_a, drops[0]), (tokens_b, drops[1])):
        tokens[:] = tokens[front:len(tokens) - back]
    return drops != [[0, 0], [0, 0]]


def instances_from_document(documents: Sequence[Sequence[np.ndarray]], index: int,
                            max_seq_length: int, short_seq_prob: float, rng: random.Random,
                            stats: InstanceStats, sentence_order: bool = False
                            ) -> List[Instance]:
    """Instances of `documents[index]`, each document a list of id arrays (one per sentence).

    NSP pairs, or with `sentence_order` SOP pairs (see the module's docstring)."""
    document = documents[index]
    max_tokens = max_seq_length - 3
    instances = []

    def new_target():
        if rng.random() < short_seq_prob:
            return rng.randint(2, max_tokens), True
        return max_tokens, False

    target, short = new_target()
    chunk, chunk_length = [], 0
    i = 0
    while i < len(document):
        chunk.append(document[i])
        chunk_length += len(document[i])
        if i == len(document) - 1 or chunk_length >= target:
            if sentence_order:
                i, made, truncated = _sentence_order_instance(document, chunk, i, max_tokens,
                                                              short, rng)
                if made is not None:
                    instances.append(made)
                    stats.instances += 1
                    stats.truncated += truncated
                    stats.swapped += made.swapped
                    stats.short_targets += short
                chunk, chunk_length = [], 0
                target, short = new_target()
                i += 1
                continue
            is_random_next = rng.random() < 0.5
            if len(chunk) == 1 and not is_random_next:
                if i + 1 < len(document):  # B is the actual next sentence
                    i += 1
                    chunk.append(document[i])
                else:
                    is_random_next = True
            a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
            tokens_a = [t for s in chunk[:a_end] for t in s.tolist()]
            tokens_b: List[int] = []
            if is_random_next:
                other = index
                for _ in range(10):
                    other = rng.randint(0, len(documents) - 1)
                    if other != index:
                        break
                stats.random_from_same_document += other == index
                other_document = documents[other]
                for sentence in other_document[rng.randint(0, len(other_document) - 1):]:
                    tokens_b.extend(sentence.tolist())
                    if len(tokens_b) >= target - len(tokens_a):
                        break
                i -= len(chunk) - a_end  # the sentences B did not use go back
            else:
                for sentence in chunk[a_end:]:
                    tokens_b.extend(sentence.tolist())
            stats.truncated += _truncate_pair(tokens_a, tokens_b, max_tokens, rng)
            instances.append(Instance(tokens_a, tokens_b, is_random_next, short))
            stats.instances += 1
            stats.random_next += is_random_next
            stats.short_targets += short
            chunk, chunk_length = [], 0
            target, short = new_target()
        i += 1
    return instances


def _sentence_order_instance(document, chunk, i, max_tokens, short, rng):
    """A sentence-order Instance for a full chunk ending at sentence i, as a triple.

    The triple is (index of the chunk's last sentence, an SOP Instance or None, whether it was
    truncated)."""
    if len(chunk) == 1 and i + 1 < len(document):  # B is the actual next sentence
        i += 1
        chunk = chunk + [document[i]]
    if len(chunk) >= 2:
        a_end = rng.randint(1, len(chunk) - 1)
        tokens_a = [t for s in chunk[:a_end] for t in s.tolist()]
        tokens_b = [t for s in chunk[a_end:] for t in s.tolist()]
    else:  # the document's last lone sentence: its two halves
        tokens = chunk[0].tolist()
        if len(tokens) < 2:
            return i, None, False
        cut = rng.randint(1, len(tokens) - 1)
        tokens_a, tokens_b = tokens[:cut], tokens[cut:]
    truncated = _truncate_pair(tokens_a, tokens_b, max_tokens, rng)
    swapped = rng.random() < 0.5
    if swapped:
        tokens_a, tokens_b = tokens_b, tokens_a
    return i, Instance(tokens_a, tokens_b, False, short, swapped), truncated


def pack_instances(instances: Sequence[Instance], max_seq_length: int, cls_id: int, sep_id: int):
    """[CLS] A [SEP] B [SEP] rows.

    input_ids, input_mask, segment_ids int32 [N, L]; next_sentence_labels int32 [N] (1 = random
    next, as in BERT; for sentence-order pairs 1 = swapped, as in ALBERT)."""
    n = len(instances)
    input_ids = np.zeros((n, max_seq_length), np.int32)
    segment_ids = np.zeros((n, max_seq_length), np.int32)
    lengths = np.zeros(n, np.int64)
    for row, inst in enumerate(instances):
        tokens = [cls_id] + inst.tokens_a + [sep_id] + inst.tokens_b + [sep_id]
        input_ids[row, :len(tokens)] = tokens
        segment_ids[row, len(inst.tokens_a) + 2:len(tokens)] = 1
        lengths[row] = len(tokens)
    input_mask = (np.arange(max_seq_length)[None, :] < lengths[:, None]).astype(np.int32)
    labels = np.array([inst.is_random_next or inst.swapped for inst in instances], np.int32)
    return {"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids,
            "next_sentence_labels": labels}


def full_sentence_rows(documents: Sequence[Sequence[np.ndarray]], max_seq_length: int,
                       sep_id: int) -> List[List[int]]:
    """MLM-only rows, RoBERTa's FULL-SENTENCES.

    The sentences of the documents, in order, fill each row up to max_seq_length - 2 tokens
    (room for [CLS] and the final [SEP]); a row may cross into the next document, with a [SEP]
    between the two. A sentence that does not fit starts the next row; one longer than a whole row
    is cut into row-sized pieces, so no text is lost. Returns the rows' tokens without [CLS] and the
    final [SEP]."""
    max_tokens = max_seq_length - 2
    rows: List[List[int]] = []
    row: List[int] = []
    for document in documents:
        separator = [sep_id] if row else []  # before this document's first sentence
        for sentence in document:
            tokens = sentence.tolist()
            if row and len(row) + len(separator) + len(tokens) > max_tokens:
                rows.append(row)
                row, separator = [], []
            while len(tokens) > max_tokens:
                rows.append(tokens[:max_tokens])
                tokens = tokens[max_tokens:]
            row.extend(separator + tokens)
            separator = []
    if row:
        rows.append(row)
    return rows


def pack_full_sentence_rows(rows: Sequence[Sequence[int]], max_seq_length: int, cls_id: int,
                            sep_id: int):
    """[CLS] tokens [SEP] rows, all segment 0, no next_sentence_labels.

    input_ids, input_mask, segment_ids int32 [N, L]."""
    input_ids = np.zeros((len(rows), max_seq_length), np.int32)
    for r, tokens in enumerate(rows):
        input_ids[r, :len(tokens) + 2] = [cls_id, *tokens, sep_id]
    lengths = np.array([len(tokens) + 2 for tokens in rows], np.int64)
    input_mask = (np.arange(max_seq_length)[None, :] < lengths[:, None]).astype(np.int32)
    return {"input_ids": input_ids, "input_mask": input_mask,
            "segment_ids": np.zeros_like(input_ids)}
