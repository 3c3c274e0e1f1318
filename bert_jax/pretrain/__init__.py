"""Pretraining: the job (job), its steps, its command (cli), the inputs it reads
(inputs) and MLM distillation (distill)."""
