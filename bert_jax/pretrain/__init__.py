"""Pretraining: the job, its steps, its command, the inputs it reads and MLM distillation.

The modules: job, steps, cli (the command), inputs and distill."""
