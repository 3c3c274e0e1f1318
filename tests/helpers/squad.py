"""SQuAD files with answers in long and short contexts, and logits that point at them."""

import json

import numpy as np

FILLER = " ".join(f"Sentence number {i} talks about nothing in particular." for i in range(12))

LONG_CONTEXT = FILLER + " The treaty was signed in Zürich, Switzerland, on 3 May 1921."


SHORT_CONTEXT = "Dr. O'Neil's café (the “Blue Door”) opened in 1999; it closed in 2004."


def squad_json(path, version_2: bool) -> str:
    qas_long = [{"id": "long", "question": "Where was the treaty signed?",
                 "answers": [{"text": "Zürich, Switzerland",
                              "answer_start": LONG_CONTEXT.index("Zürich")}]}]
    qas_short = [
        {"id": "quote", "question": "What was the café called?",
         "answers": [{"text": "“Blue Door”", "answer_start": SHORT_CONTEXT.index("“")}]},
        {"id": "owner", "question": "Whose café was it?",
         "answers": [{"text": "Dr. O'Neil's", "answer_start": 0}]}]
    if version_2:
        qas_short.append({"id": "none", "question": "Who bought the café in 2010?",
                          "answers": [], "is_impossible": True})
    data = {"version": "v2.0" if version_2 else "1.1", "data": [{"title": "t", "paragraphs": [
        {"context": LONG_CONTEXT, "qas": qas_long},
        {"context": SHORT_CONTEXT, "qas": qas_short}]}]}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False)
    return str(path)


def oracle_outputs(features, shorten_long_answer=False):
    """Logits that point at each feature's labeled span (CLS when it has none)."""
    outputs = []
    for f in features:
        start = np.full(len(f["input_ids"]), -10.0, np.float32)
        end = start.copy()
        s, e = f["start_position"], f["end_position"]
        if shorten_long_answer and s > 0 and f["_example_index"] == 0:
            e = s + next(i for i, p in enumerate(range(s, e + 1))
                         if f["_offsets"][f["_token_to_context"][p]][1] ==
                         LONG_CONTEXT.index("Zürich") + len("Zürich"))
        start[s], end[e] = 10.0, 10.0
        outputs.append({"start_logits": start, "end_logits": end})
    return outputs
