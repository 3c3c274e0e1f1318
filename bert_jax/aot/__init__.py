"""Ahead-of-time compilation of the train step for accelerators this machine does not have.

`bert-jax compile` (compile), its search over meshes and remat policies (search), the TPU slices
(tpu_slices) and GPU hosts (gpu_hosts) known, and the collectives counted in compiled HLO
(collectives)."""
