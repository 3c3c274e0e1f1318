"""One process standing in for two hosts: `bert-jax pretrain` flags, but every global
batch is host 0's rows followed by host 1's, as `jax.make_array_from_process_local_data`
assembles them in a real two-process run. Used by test_multihost.py."""

import sys

import numpy as np

from bert_jax.pretrain import cli as cli_pretrain
from bert_jax.pretrain import inputs


class TwoHosts:
    def __init__(self, make, *args, state=None, **kwargs):
        states = state or [None, None]
        self.hosts = [make(*args, **{**kwargs, "state": s, "process_index": i,
                                     "process_count": 2}) for i, s in enumerate(states)]

    def __iter__(self):
        return self

    def __next__(self):
        batches = [next(h) for h in self.hosts]
        return {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}

    def get_state(self):
        return [h.get_state() for h in self.hosts]

    def close(self):
        for h in self.hosts:
            h.close()


if __name__ == "__main__":
    make = inputs.make_iterator
    inputs.make_iterator = lambda *args, **kw: TwoHosts(make, *args, **kw)
    sys.exit(cli_pretrain.pretrain_main(sys.argv[1:]))
