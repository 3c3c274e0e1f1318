"""Fine-tuning: tasks (GLUE, CSV/TSV/JSONL, CoNLL tagging, SQuAD), the shared training
loop, and the `finetune` / `evaluate` / `predict` commands."""
