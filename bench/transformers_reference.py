"""transformers' usual fine-tuning recipe, the reference `bench_finetune.py` compares
bert_jax against: `BertForSequenceClassification` (BERT's pooler + linear head),
AdamW lr 5e-5 without weight decay (the Trainer's defaults), 10% linear warmup then
linear decay, gradient norm clipped to 1.0, the model at the end of the schedule tested.

Rows are padded to `max_seq_length`, as bert_jax pads them without length bucketing,
so both sides do the same work per example.
"""

from __future__ import annotations

import math
import time


def finetune_classifier(hf_dir: str, train: list[tuple[str, str]], test: list[tuple[str, str]],
                        *, epochs: float, batch_size: int, max_seq_length: int,
                        learning_rate: float = 5e-5, warmup_proportion: float = 0.1,
                        seed: int = 42) -> dict:
    """Fine-tunes on (text, label) pairs; returns test accuracy and training throughput
    (the first step, which warms PyTorch's kernels up, is left out as for bert_jax)."""
    import torch
    import transformers

    torch.manual_seed(seed)
    labels = sorted({label for _, label in train})
    index = {label: i for i, label in enumerate(labels)}
    tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir)
    model = transformers.BertForSequenceClassification.from_pretrained(
        hf_dir, num_labels=len(labels))

    def encode(rows):
        batch = tokenizer([text for text, _ in rows], truncation=True, padding="max_length",
                          max_length=max_seq_length, return_tensors="pt")
        batch["labels"] = torch.tensor([index.get(label, -100) for _, label in rows])
        return batch

    steps_per_epoch = math.ceil(len(train) / batch_size)
    num_steps = max(1, int(epochs * steps_per_epoch))
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.0)
    schedule = transformers.get_linear_schedule_with_warmup(
        optimizer, int(warmup_proportion * num_steps), num_steps)
    # Tokenized once up front, as bert_jax featurizes before its timed loop.
    encoded = encode(train)
    generator = torch.Generator().manual_seed(seed)
    model.train()
    step, examples, train_seconds = 0, 0, 0.0
    while step < num_steps:
        order = torch.randperm(len(train), generator=generator).tolist()
        for start in range(0, len(order), batch_size):
            if step >= num_steps:
                break
            rows = torch.tensor(order[start:start + batch_size])
            began = time.perf_counter()
            loss = model(**{k: v[rows] for k, v in encoded.items()}).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
            if step:  # the first step is warm-up
                train_seconds += time.perf_counter() - began
                examples += len(rows)
            step += 1

    model.eval()
    correct = 0
    with torch.no_grad():
        for start in range(0, len(test), 64):
            batch = encode(test[start:start + 64])
            gold = batch.pop("labels")
            correct += int((model(**batch).logits.argmax(-1) == gold).sum())
    return {"test_accuracy": correct / len(test), "train_steps": num_steps,
            "train_seconds": round(train_seconds, 2),
            "train_examples_per_second": round(examples / max(train_seconds, 1e-9), 2)}
