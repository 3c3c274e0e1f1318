"""SQuAD v1.1 (`squad`) and v2.0 (`squad_v2`) span extraction.

From tfds or the official JSON files (`train_file`, `validation_file`).

Features are `[CLS] question [SEP] context-window [SEP]`: the question cut to
`max_query_length` tokens, the context split into windows `doc_stride` tokens apart.
Answers are recovered as character spans of the original context through the
tokenizer's offsets, so punctuation, case and accents come back exactly. Each token
is scored only in the window where it has the most context (BERT's rule); v2
predicts "no answer" when the null score beats the best span by more than
`null_score_diff_threshold`. Scores are SQuAD's EM and F1, or for Chinese
answers CMRC 2018's character-level ones (`answer_metric`: auto, squad or cmrc).
"""

from __future__ import annotations

import collections

import numpy as np

from bert_jax.errors import UserError
from bert_jax.finetune import files
from bert_jax.finetune.tasks import metrics
from bert_jax.finetune.tasks.base import Task, register
from bert_jax.host import encoding
from bert_jax.models import losses, task_heads


def read_squad_json(path: str) -> list[dict]:
    """Examples of an official SQuAD JSON file ({'data': [{'paragraphs': [...]}]})."""
    return squad_examples(encoding.read_json(path), path)


def squad_examples(data, path: str) -> list[dict]:
    """The examples of a parsed SQuAD JSON document; a malformed one names what is wrong."""
    if not isinstance(data, dict) or "data" not in data:
        raise UserError(f"{path} is not a SQuAD JSON file (no top-level 'data')")
    try:
        return [{"id": str(qa["id"]), "question": qa["question"], "context": para["context"],
                 "answers": [{"text": a["text"], "answer_start": a["answer_start"]}
                             for a in qa.get("answers", [])],
                 "is_impossible": bool(qa.get("is_impossible", False))}
                for article in data["data"] for para in article["paragraphs"]
                for qa in para["qas"]]
    except (KeyError, TypeError, AttributeError) as e:
        what = f"the key {e.args[0]!r}" if isinstance(e, KeyError) else f"a well-formed entry ({e})"
        raise UserError(f"{path} is not in the SQuAD format: an entry lacks {what}; expected "
                        "data[].paragraphs[].{context, qas[].{id, question, answers}}") from None


def answer_char_span(example) -> tuple[int, int] | None:
    """[start, end) of the first answer in the context, or None (none or not found)."""
    if example.get("is_impossible") or not example.get("answers"):
        return None
    answer = example["answers"][0]
    start, text = int(answer["answer_start"]), answer["text"]
    if example["context"][start:start + len(text)] != text:
        start = example["context"].find(text)  # a misplaced offset; None if absent
        if start < 0 or not text:
            return None
    return start, start + len(text)


def windows(num_tokens: int, max_tokens: int, stride: int) -> list[tuple[int, int]]:
    """(start, length) of context windows covering all tokens, `stride` apart."""
    spans, start = [], 0
    while True:
        length = min(max_tokens, num_tokens - start)
        spans.append((start, length))
        if start + length >= num_tokens:
            return spans
        start += min(length, stride)


def _max_context(spans, span_index: int, position: int) -> bool:
    """True if the window `span_index` gives token `position` its most context."""
    def score(span):
        start, length = span
        return min(position - start, start + length - 1 - position) + 0.01 * length
    containing = [i for i, (s, n) in enumerate(spans) if s <= position < s + n]
    return max(containing, key=lambda i: score(spans[i])) == span_index


class SquadTask(Task):
    eval_splits = ("validation",)
    test_split = None
    selection_metric = "f1"

    def __init__(self, config, name: str):
        super().__init__(config)
        self.name = name
        self.version_2 = name == "squad_v2"
        self._encodings: dict[str, object] = {}

    def load(self, split):
        path = self.config[{"train": "train_file", "validation": "validation_file"}[split]]
        if path:
            return read_squad_json(path)
        rows = files.tfds_examples("squad/v2.0" if self.version_2 else "squad/v1.1", split,
                                   data_dir=self.config.tfds_data_dir,
                                   download=self.config.tfds_download)
        return [{"id": files.text(r["id"]), "question": files.text(r["question"]),
                 "context": files.text(r["context"]),
                 "answers": [{"text": files.text(t), "answer_start": int(s)} for t, s in
                             zip(r["answers"]["text"], r["answers"]["answer_start"])],
                 "is_impossible": bool(r.get("is_impossible", False))} for r in rows]

    def is_labeled(self, example):
        return example.get("answers") is not None

    def head(self):
        return task_heads.Head("span", 2)  # start and end scores

    def spec(self):
        return {**super().spec(), "family": "squad", "version_2_with_negative": self.version_2}

    def read_inputs(self, path):
        if path.endswith(".json"):
            try:
                data = encoding.read_json(path)
            except ValueError:
                data = None  # JSON lines named .json
            if isinstance(data, dict) and "data" in data:
                return [{**ex, "answers": None} for ex in squad_examples(data, path)]
        rows, columns = files.read_table(path)
        questions = files.column(rows, columns, "question", path, "question")
        contexts = files.column(rows, columns, "context", path, "context")
        return [{"id": str(r.get("id", i)), "question": q, "context": c, "answers": None}
                for i, (r, q, c) in enumerate(zip(rows, questions, contexts))]

    def examples_from_inputs(self, inputs):
        examples = []
        for i, item in enumerate(inputs):
            if not (isinstance(item, dict) and isinstance(item.get("question"), str)
                    and isinstance(item.get("context"), str)):
                raise UserError(f"input {i}: expected a dict with 'question' and 'context' "
                                f"strings, got {item!r:.80}")
            examples.append({"id": str(item.get("id", i)), "question": item["question"],
                             "context": item["context"], "answers": None})
        return examples

    def _encode_context(self, tokenizer, context: str):
        if context not in self._encodings:
            if len(self._encodings) > 10_000:
                self._encodings.clear()
            self._encodings[context] = tokenizer.encode(context)
        return self._encodings[context]

    def featurize(self, examples, tokenizer, max_seq_length, *, training):
        cfg = self.config
        features = []
        for index, ex in enumerate(examples):
            query = tokenizer.encode(ex["question"]).ids[:cfg.get("max_query_length", 64)]
            context = self._encode_context(tokenizer, ex["context"])
            pair_format = tokenizer.pair_format  # [CLS] q [SEP] c [SEP], or the family's
            spans = windows(len(context.ids),
                            max_seq_length - len(query) - pair_format.num_added(True),
                            cfg.get("doc_stride", 128))
            answer = answer_char_span(ex) if training else None
            if answer is not None:  # token span of the answer's characters
                inside = [i for i, (s, e) in enumerate(context.offsets)
                          if s < answer[1] and e > answer[0]]
                answer = (inside[0], inside[-1]) if inside else None
            for span_index, (start, length) in enumerate(spans):
                offset = pair_format.second_start(len(query))
                ids, segments = pair_format.build(query, context.ids[start:start + length])
                start_pos = end_pos = 0
                if answer is not None and start <= answer[0] and answer[1] < start + length:
                    start_pos, end_pos = answer[0] - start + offset, answer[1] - start + offset
                elif training and not self.version_2 and answer is None and \
                        not ex.get("is_impossible"):
                    continue  # v1: an answer we cannot place teaches nothing
                features.append({
                    "input_ids": ids, "segment_ids": segments,
                    "start_position": start_pos, "end_position": end_pos,
                    "feature_index": len(features), "_example_index": index,
                    "_token_to_context": [-1] * offset + list(range(start, start + length)),
                    "_offsets": context.offsets,  # shared by the example's windows
                    "_max_context": [False] * offset + [
                        _max_context(spans, span_index, p) for p in range(start, start + length)],
                })
        return features

    def model_inputs(self, batch):
        return {k: batch[k] for k in ("input_ids", "input_mask", "segment_ids")}

    def loss(self, outputs, batch):
        start, end = outputs
        return {"loss": losses.span_loss(start, end, batch["start_position"],
                                         batch["end_position"], batch["example_weights"])}

    def soft_loss(self, student, teacher, batch, temperature):
        """The mean of the KLs between the start and between the end distributions."""
        weights = batch["example_weights"]
        start, weight = losses.distillation_kl(student[0], teacher[0], temperature, weights)
        end, _ = losses.distillation_kl(student[1], teacher[1], temperature, weights)
        return (start + end) / 2, weight

    def eval_outputs(self, outputs, batch):
        start, end = outputs
        return {"start_logits": start.astype(np.float32), "end_logits": end.astype(np.float32)}

    def _best_spans(self, example, features, outputs):
        """(n-best [{text, score, start, end}], null score) of one example."""
        cfg = self.config
        n_best, max_len = cfg.get("n_best_size", 20), cfg.get("max_answer_length", 30)
        candidates, null_score = {}, np.inf
        for feature, out in zip(features, outputs):
            n = len(feature["input_ids"])
            start_logits, end_logits = out["start_logits"][:n], out["end_logits"][:n]
            null_score = min(null_score, float(start_logits[0] + end_logits[0]))
            to_ctx, max_ctx = feature["_token_to_context"], feature["_max_context"]
            offsets = feature["_offsets"]
            for s in np.argsort(-start_logits)[:n_best]:
                for e in np.argsort(-end_logits)[:n_best]:
                    if s >= len(to_ctx) or e >= len(to_ctx) or to_ctx[s] < 0 or to_ctx[e] < 0:
                        continue
                    if e < s or e - s + 1 > max_len or not max_ctx[s]:
                        continue
                    char_start, char_end = offsets[to_ctx[s]][0], offsets[to_ctx[e]][1]
                    score = float(start_logits[s] + end_logits[e])
                    key = (char_start, char_end)
                    if key not in candidates or candidates[key]["score"] < score:
                        candidates[key] = {"text": example["context"][char_start:char_end],
                                           "score": score, "start": int(char_start),
                                           "end": int(char_end)}
        best = sorted(candidates.values(), key=lambda c: -c["score"])[:n_best]
        return best, null_score

    def _answers(self, examples, features, outputs):
        by_example = collections.defaultdict(list)
        for feature, out in zip(features, outputs):
            by_example[feature["_example_index"]].append((feature, out))
        threshold = self.config.null_score_diff_threshold
        records = []
        for index, ex in enumerate(examples):
            pairs = by_example.get(index, [])
            best, null = self._best_spans(ex, [f for f, _ in pairs], [o for _, o in pairs])
            top = best[0] if best else {"text": "", "score": -np.inf, "start": -1, "end": -1}
            record = {"id": ex["id"], "question": ex["question"], "answer": top["text"],
                      "score": top["score"], "start_char": top["start"], "end_char": top["end"]}
            if self.version_2:
                diff = null - top["score"]
                record["null_score_diff"] = float(diff)
                if diff > threshold:
                    record.update(answer="", score=null, start_char=-1, end_char=-1)
            scores = np.array([c["score"] for c in best] or [0.0])
            probs = np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum()
            record["nbest"] = [{**c, "probability": round(float(p), 6)}
                               for c, p in zip(best, probs)]
            records.append(record)
        return records

    def evaluate(self, examples, features, outputs):
        records = self._answers(examples, features, outputs)
        predictions = {r["id"]: r["answer"] for r in records}
        gold = {ex["id"]: [] if ex.get("is_impossible") else [a["text"] for a in ex["answers"]]
                for ex in examples}
        chinese = metrics.chinese_answers(gold, self.config.answer_metric)
        return metrics.squad_scores(predictions, gold, chinese=chinese)

    def predict(self, examples, features, outputs):
        return self._answers(examples, features, outputs)


register("squad")(lambda config: SquadTask(config, "squad"))
register("squad_v2")(lambda config: SquadTask(config, "squad_v2"))
