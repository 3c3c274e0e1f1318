"""Fine-tuning: tasks, the shared training loop, and the commands that run them.

The tasks: GLUE, CSV/TSV/JSONL, CoNLL tagging, SQuAD; the commands: `finetune` / `evaluate` /
`predict`."""
