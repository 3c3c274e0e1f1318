"""NER tag schemes: entity F1 as seqeval computes it on IOB2, IOB1, IOBES, BILOU and BMES;
the scheme detected from training tags or named; predictions written in it."""
from __future__ import annotations

import random

import pytest

from bert_jax.finetune.tasks import metrics, tag_schemes
from bert_jax.tokenization import text_io

seqeval_metrics = pytest.importorskip("seqeval.metrics", reason="seqeval is in the test extras")
seqeval_scheme = pytest.importorskip("seqeval.scheme")

TYPES = ("PER", "LOC", "ORG")
SCHEMES = ("IOB2", "IOB1", "IOBES", "BILOU", "BMES")
# seqeval's strict mode knows every scheme but BMES, which spells IOBES with M- for I-.
SEQEVAL = {"IOB2": "IOB2", "IOB1": "IOB1", "IOBES": "IOBES", "BILOU": "BILOU", "BMES": "IOBES"}


def _as_seqeval(tags, scheme):
    return [f"I-{t[2:]}" if t.startswith("M-") else t for t in tags] if scheme == "BMES" \
        else tags


def _random_entities(rng, length):
    """Non-overlapping (type, first, last) spans, often adjacent and of one type."""
    spans, position = [], rng.randint(0, 2)
    while position < length:
        last = min(length - 1, position + rng.randint(0, 3))
        spans.append((rng.choice(TYPES[:2]), position, last))
        position = last + 1 + rng.choice((0, 0, 1, 2))
    return spans


def _without_overlaps(spans):
    kept = []
    for span in sorted(spans, key=lambda e: e[1]):
        if not kept or span[1] > kept[-1][2]:
            kept.append(span)
    return kept


def _seqeval_entities(sequences, scheme):
    found = seqeval_scheme.Entities([_as_seqeval(s, scheme) for s in sequences],
                                    getattr(seqeval_scheme, SEQEVAL[scheme]))
    offsets = [0]
    for seq in sequences:  # text_io.entities joins the sentences with one O between
        offsets.append(offsets[-1] + len(seq) + 1)
    return {(e.tag, offsets[e.sent_id] + e.start, offsets[e.sent_id] + e.end - 1)
            for sentence in found.entities for e in sentence}


@pytest.mark.parametrize("scheme", SCHEMES)
def test_well_formed_sequences_score_as_seqeval_strict(scheme):
    """Entities encoded in each scheme come back as encoded, as seqeval's strict mode
    for that scheme reads them, and the F1 of two such sets is seqeval's."""
    rng = random.Random(SCHEMES.index(scheme))
    for _ in range(40):
        lengths = [rng.randint(1, 14) for _ in range(4)]
        gold_spans = [_random_entities(rng, n) for n in lengths]
        pred_spans = [[e for e in spans if rng.random() < 0.7] + _random_entities(rng, n)[:1]
                      for spans, n in zip(gold_spans, lengths)]
        pred_spans = [_without_overlaps(spans) for spans in pred_spans]
        gold = [text_io.encode_entities(s, n, scheme) for s, n in zip(gold_spans, lengths)]
        pred = [text_io.encode_entities(s, n, scheme) for s, n in zip(pred_spans, lengths)]
        assert text_io.entities(gold) == _seqeval_entities(gold, scheme)
        assert all(text_io.entities([g]) == set(s) for g, s in zip(gold, gold_spans))
        ours = metrics.entity_scores(pred, gold)
        kwargs = {"mode": "strict", "scheme": getattr(seqeval_scheme, SEQEVAL[scheme])}
        theirs = [_as_seqeval(s, scheme) for s in gold], [_as_seqeval(s, scheme) for s in pred]
        assert ours["f1"] == pytest.approx(seqeval_metrics.f1_score(*theirs, **kwargs))
        assert ours["precision"] == pytest.approx(
            seqeval_metrics.precision_score(*theirs, **kwargs))


@pytest.mark.parametrize("scheme", SCHEMES)
def test_ill_formed_sequences_score_as_seqeval_default(scheme):
    """Random tags (I- after O, M- without E-, ...) are chunked by seqeval's default
    (lenient) rules; BILOU and BMES as the IOBES they spell."""
    rng = random.Random(10 + SCHEMES.index(scheme))
    prefixes = tag_schemes.SCHEMES[scheme]
    tags = ["O"] + [f"{p}-{t}" for p in prefixes for t in TYPES]
    iobes = {"L": "E", "U": "S", "M": "I"}
    spelled = lambda seqs: [[iobes.get(t[0], t[0]) + t[1:] if t != "O" else t for t in s]
                            for s in seqs]
    for _ in range(60):
        gold = [[rng.choice(tags) for _ in range(rng.randint(1, 12))] for _ in range(5)]
        pred = [[rng.choice(tags) for _ in seq] for seq in gold]
        ours = metrics.entity_scores(pred, gold)
        theirs = spelled(gold), spelled(pred)
        assert ours["precision"] == pytest.approx(seqeval_metrics.precision_score(*theirs))
        assert ours["recall"] == pytest.approx(seqeval_metrics.recall_score(*theirs))
        assert ours["f1"] == pytest.approx(seqeval_metrics.f1_score(*theirs))
        if scheme in ("IOB2", "IOB1", "IOBES"):  # seqeval reads these without help
            assert ours["f1"] == pytest.approx(seqeval_metrics.f1_score(gold, pred))


def test_rewrite_writes_predictions_well_formed_in_the_scheme():
    raw = ["I-PER", "I-PER", "O", "B-LOC", "I-LOC", "I-ORG", "B-PER", "I-PER", "B-PER"]
    assert text_io.rewrite_tags(raw, "IOB2") == [
        "B-PER", "I-PER", "O", "B-LOC", "I-LOC", "B-ORG", "B-PER", "I-PER", "B-PER"]
    assert text_io.rewrite_tags(raw, "IOB1") == [
        "I-PER", "I-PER", "O", "I-LOC", "I-LOC", "I-ORG", "I-PER", "I-PER", "B-PER"]
    assert text_io.rewrite_tags(raw, "BMES") == [
        "B-PER", "E-PER", "O", "B-LOC", "E-LOC", "S-ORG", "B-PER", "E-PER", "S-PER"]
    assert text_io.rewrite_tags(["B-PER", "M-PER", "M-PER", "O", "M-LOC"], "BILOU") == [
        "B-PER", "I-PER", "L-PER", "O", "U-LOC"]
    assert text_io.rewrite_tags(["NN", "VB"], None) == ["NN", "VB"]
    for scheme in SCHEMES:  # the entities never change
        assert text_io.entities([text_io.rewrite_tags(raw, scheme)]) == text_io.entities([raw])


def test_scheme_detected_from_training_tags():
    detect = tag_schemes.detect
    assert detect([["B-PER", "M-PER", "E-PER", "S-LOC", "O"]]) == "BMES"
    assert detect([["B-PER", "I-PER", "E-PER", "S-LOC"]]) == "IOBES"
    assert detect([["U-PER", "B-LOC", "L-LOC"]]) == "BILOU"
    assert detect([["B-PER", "I-PER", "O", "B-LOC"]]) == "IOB2"
    # CoNLL-2003's original IOB1: entities start with I-, B- only between two of a type.
    assert detect([["I-PER", "I-PER", "O", "I-LOC", "B-LOC", "O", "I-ORG"]]) == "IOB1"
    assert detect([["NN", "VB", "O"]]) is None and detect([["O", "O"]]) is None
    assert detect([["B-PER", "PER"]]) is None  # a tag without a prefix: not NER


def test_scheme_named_in_the_config():
    tags = [["B-PER", "M-PER", "E-PER", "O"]]
    assert tag_schemes.resolve_scheme("auto", tags) == "BMES"
    assert tag_schemes.resolve_scheme("bmes", tags) == "BMES"
    assert tag_schemes.resolve_scheme("BIO", [["B-X", "I-X"]]) == "IOB2"
    assert tag_schemes.resolve_scheme("BIOES", [["S-X"]]) == "IOBES"
    assert tag_schemes.resolve_scheme("IOB1", [["B-X", "I-X"]]) == "IOB1"
    assert tag_schemes.resolve_scheme("none", tags) is None
    with pytest.raises(ValueError, match="tag_scheme=BIO: the training tag 'M-PER' is not "
                                         "in that scheme"):
        tag_schemes.resolve_scheme("BIO", tags)
    with pytest.raises(ValueError, match="tag_scheme must be one of auto, none, IOB2"):
        tag_schemes.resolve_scheme("BIOLU", tags)
