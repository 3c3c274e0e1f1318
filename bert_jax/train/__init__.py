"""The skeleton every training job runs.

state, step, loop, optimizer, partitioner, checkpoints, metrics, preemption, and the run config
(schema and loader). Knows no job."""
