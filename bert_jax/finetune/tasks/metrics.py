"""Task metrics: GLUE's, entity-level tagging scores, SQuAD's, and CMRC 2018's.

GLUE's official ones, entity-level tagging scores with seqeval's semantics, SQuAD's official exact
match and F1, and CMRC 2018's for Chinese answers.

All functions take plain Python/numpy values on the host and return floats.
"""

from __future__ import annotations

import collections
import re
import string
import unicodedata
from typing import Sequence

import numpy as np
import scipy.stats
from sklearn import metrics as sk

from bert_jax.errors import UserError
from bert_jax.tokenization.chars import is_cjk
from bert_jax.tokenization.text_io import entities

# --- classification and regression ------------------------------------------------

def accuracy(predictions: Sequence[int], labels: Sequence[int]) -> dict[str, float]:
    return {"accuracy": float(np.mean(np.asarray(predictions) == np.asarray(labels)))}


def matthews(predictions, labels) -> dict[str, float]:
    return {"matthews_corrcoef": float(sk.matthews_corrcoef(labels, predictions))}


def f1_and_accuracy(predictions, labels) -> dict[str, float]:
    """Binary F1 of the positive class (label 1) and accuracy, as GLUE reports MRPC/QQP."""
    return {"f1": float(sk.f1_score(labels, predictions, zero_division=0.0)),
            **accuracy(predictions, labels)}


def pearson_spearman(predictions, labels) -> dict[str, float]:
    predictions, labels = np.asarray(predictions, float), np.asarray(labels, float)
    if np.std(predictions) == 0 or np.std(labels) == 0:  # correlation undefined
        return {"pearson": 0.0, "spearman": 0.0}
    return {"pearson": float(scipy.stats.pearsonr(predictions, labels)[0]),
            "spearman": float(scipy.stats.spearmanr(predictions, labels)[0])}


def regression(predictions, labels) -> dict[str, float]:
    err = np.asarray(predictions, float) - np.asarray(labels, float)
    return {**pearson_spearman(predictions, labels), "mse": float(np.mean(err ** 2))}


METRICS = {"accuracy": accuracy, "matthews": matthews, "f1_accuracy": f1_and_accuracy,
           "pearson_spearman": pearson_spearman, "regression": regression}


# --- tagging ----------------------------------------------------------------------------

def entity_scores(predicted: Sequence[Sequence[str]], gold: Sequence[Sequence[str]]
                  ) -> dict[str, float]:
    """Micro-averaged entity precision/recall/F1, plus per-type F1 under `f1_TYPE`.

    The micro average is seqeval's `classification_report` micro avg."""
    pred_set, gold_set = entities(predicted), entities(gold)
    out = _prf(len(pred_set & gold_set), len(pred_set), len(gold_set))
    for type_ in sorted({t for t, _, _ in gold_set | pred_set}):
        p = {e for e in pred_set if e[0] == type_}
        g = {e for e in gold_set if e[0] == type_}
        out[f"f1_{type_}"] = _prf(len(p & g), len(p), len(g))["f1"]
    return out


def _prf(correct: int, predicted: int, gold: int) -> dict[str, float]:
    precision = correct / predicted if predicted else 0.0
    recall = correct / gold if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def token_accuracy(predicted: Sequence[Sequence[str]], gold: Sequence[Sequence[str]]
                   ) -> dict[str, float]:
    pairs = [(p, g) for ps, gs in zip(predicted, gold) for p, g in zip(ps, gs)]
    correct = sum(p == g for p, g in pairs)
    return {"token_accuracy": correct / len(pairs) if pairs else 0.0}


# --- SQuAD -----------------------------------------------------------------------------

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """The official SQuAD normalisation.

    Lower case, drop ASCII punctuation and the articles a/an/the, collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def token_f1(prediction: str, gold: str) -> float:
    pred_tokens, gold_tokens = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred_tokens or not gold_tokens:  # no-answer: 1 only if both are empty
        return float(pred_tokens == gold_tokens)
    common = collections.Counter(pred_tokens) & collections.Counter(gold_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


# CMRC 2018's evaluation script drops these besides punctuation (some are symbols).
_CMRC_SYMBOLS = set("-:_*^/\\~`+=，。：？！“”；’《》…·、「」（）－～『』")
ANSWER_METRICS = ("auto", "squad", "cmrc")


def cmrc_tokens(text: str) -> list[str]:
    """CMRC 2018's mixed segmentation, punctuation dropped.

    Lower-cased; each CJK character a token; other runs whole, ended by whitespace, CJK and
    punctuation."""
    tokens, run = [], []
    for ch in text.lower() + " ":
        punctuation = ch in _CMRC_SYMBOLS or unicodedata.category(ch).startswith("P")
        cjk = is_cjk(ord(ch))
        if (punctuation or cjk or ch.isspace()) and run:
            tokens.append("".join(run))
            run = []
        if cjk:
            tokens.append(ch)
        elif not (punctuation or ch.isspace()):
            run.append(ch)
    return tokens


def cmrc_exact_match(prediction: str, gold: str) -> float:
    return float(cmrc_tokens(prediction) == cmrc_tokens(gold))


def cmrc_f1(prediction: str, gold: str) -> float:
    """CMRC 2018's F1, from the longest common *contiguous* run of tokens (its `find_lcs`).

    Precision over the prediction's tokens, recall over the gold's."""
    pred, ref = cmrc_tokens(prediction), cmrc_tokens(gold)
    if not pred or not ref:
        return float(pred == ref)
    longest, previous = 0, [0] * (len(ref) + 1)
    for p in pred:
        current = [0] * (len(ref) + 1)
        for j, r in enumerate(ref):
            if p == r:
                current[j + 1] = previous[j] + 1
                longest = max(longest, current[j + 1])
        previous = current
    if longest == 0:
        return 0.0
    precision, recall = longest / len(pred), longest / len(ref)
    return 2 * precision * recall / (precision + recall)


def chinese_answers(gold_answers: dict[str, list[str]], metric: str = "auto") -> bool:
    """Whether to score with CMRC's character-level metric.

    `metric` 'cmrc' or 'squad', or 'auto': when any gold answer has a CJK character."""
    if metric not in ANSWER_METRICS:
        raise UserError(f"answer_metric must be one of {', '.join(ANSWER_METRICS)}; "
                        f"got {metric!r}")
    if metric != "auto":
        return metric == "cmrc"
    return any(is_cjk(ord(ch)) for golds in gold_answers.values() for g in golds for ch in g)


def squad_scores(predictions: dict[str, str], gold_answers: dict[str, list[str]],
                 chinese: bool = False) -> dict[str, float]:
    """Official SQuAD v1.1/v2.0 EM and F1 in percent, max over the gold answers.

    `chinese`: CMRC 2018's character-level EM and F1 instead (`cmrc_f1`).

    gold_answers: question id -> answer texts; an empty list means unanswerable (the
    right prediction is ""). Unanswered ids count as "". v2 adds HasAns/NoAns splits.
    """
    em_fn, f1_fn = (cmrc_exact_match, cmrc_f1) if chinese else (exact_match, token_f1)
    normalize = cmrc_tokens if chinese else normalize_answer
    em, f1, has_answer = [], [], []
    for qid, golds in gold_answers.items():
        golds = [g for g in golds if normalize(g)] or [""]
        pred = predictions.get(qid, "")
        em.append(max(em_fn(pred, g) for g in golds))
        f1.append(max(f1_fn(pred, g) for g in golds))
        has_answer.append(golds != [""])
    em, f1, has_answer = np.array(em), np.array(f1), np.array(has_answer, bool)
    out = {"exact_match": 100 * float(em.mean()), "f1": 100 * float(f1.mean())}
    if not has_answer.all():
        for name, mask in (("HasAns", has_answer), ("NoAns", ~has_answer)):
            if mask.any():
                out[f"{name}_exact_match"] = 100 * float(em[mask].mean())
                out[f"{name}_f1"] = 100 * float(f1[mask].mean())
    return out
