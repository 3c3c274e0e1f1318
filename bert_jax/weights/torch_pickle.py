"""Reads a PyTorch `pytorch_model.bin` state dict into numpy, without torch or pickled code.

No pickled code is executed: the unpickler only admits the handful of reconstructors a state dict
uses, and tensors are read straight from the zip.
"""

from __future__ import annotations

import collections
import pickle
import zipfile

import numpy as np

from bert_jax.errors import UserError

_STORAGE_DTYPES = {
    "FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16,
    "BFloat16Storage": "bfloat16", "LongStorage": np.int64, "IntStorage": np.int32,
    "ShortStorage": np.int16, "CharStorage": np.int8, "ByteStorage": np.uint8,
    "BoolStorage": np.bool_,
}


class _StorageType:
    def __init__(self, name):
        self.dtype = _STORAGE_DTYPES[name]


def _rebuild_tensor(storage, offset, size, stride, *_):
    if not size:
        return storage[offset:offset + 1].reshape(())
    itemsize = storage.dtype.itemsize
    return np.lib.stride_tricks.as_strided(
        storage[offset:], shape=tuple(size), strides=tuple(s * itemsize for s in stride)).copy()


def _rebuild_parameter(tensor, *_):
    return tensor


class _SafeUnpickler(pickle.Unpickler):
    def __init__(self, file, archive: zipfile.ZipFile, prefix: str):
        super().__init__(file)
        self._archive, self._prefix = archive, prefix

    def find_class(self, module, name):
        allowed = {
            ("collections", "OrderedDict"): collections.OrderedDict,
            ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
            ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
        }
        if (module, name) in allowed:
            return allowed[(module, name)]
        if module == "torch" and name in _STORAGE_DTYPES:
            return _StorageType(name)
        raise pickle.UnpicklingError(
            f"refusing to load {module}.{name}: not part of a plain tensor state dict")

    def persistent_load(self, pid):
        kind, storage_type, key, _location, _numel = pid
        if kind != "storage":
            raise pickle.UnpicklingError(f"unknown persistent id {kind!r}")
        raw = self._archive.read(f"{self._prefix}data/{key}")
        if storage_type.dtype == "bfloat16":  # widen bf16 to float32 bit-exactly
            bits = np.frombuffer(raw, np.uint16).astype(np.uint32) << 16
            return bits.view(np.float32)
        return np.frombuffer(raw, storage_type.dtype)


def load_torch_state_dict(path: str) -> dict[str, np.ndarray]:
    """{name: array} from a torch.save'd state dict (the zip format of torch >= 1.6)."""
    if not zipfile.is_zipfile(path):
        raise UserError(f"{path} is a legacy (pre-1.6) torch file; re-save it with a current "
                        "torch or convert it to model.safetensors")
    with zipfile.ZipFile(path) as archive:
        pkl = next((n for n in archive.namelist() if n.endswith("data.pkl")), None)
        if pkl is None:
            raise UserError(f"{path} has no data.pkl: not a torch checkpoint")
        prefix = pkl[: -len("data.pkl")]
        with archive.open(pkl) as f:
            state = _SafeUnpickler(f, archive, prefix).load()
    if not isinstance(state, dict):
        raise UserError(f"{path} holds a {type(state).__name__}, not a state dict")
    return {k: np.asarray(v) for k, v in state.items()}
