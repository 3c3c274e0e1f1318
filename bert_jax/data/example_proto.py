"""tf.train.Example serialization without TensorFlow.

The few messages of TensorFlow's example.proto and feature.proto (same field numbers, proto3, packed
lists), built at import with `protobuf` alone, so create-data's workers skip TensorFlow's ~3 s
import. Bytes equal TensorFlow's `SerializeToString(deterministic=True)` (a test compares them)."""
from __future__ import annotations

from typing import List

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory


def _example_class():
    file = descriptor_pb2.FileDescriptorProto(name="bert_jax_example.proto",
                                              package="bert_jax_example", syntax="proto3")
    T = descriptor_pb2.FieldDescriptorProto
    def message(name, *fields):
        m = file.message_type.add(name=name)
        for field_name, number, kind, label, type_name in fields:
            field = m.field.add(name=field_name, number=number, type=kind, label=label)
            if type_name:
                field.type_name = f".bert_jax_example.{type_name}"
        return m
    repeated, optional = T.LABEL_REPEATED, T.LABEL_OPTIONAL
    message("BytesList", ("value", 1, T.TYPE_BYTES, repeated, None))
    message("FloatList", ("value", 1, T.TYPE_FLOAT, repeated, None))
    message("Int64List", ("value", 1, T.TYPE_INT64, repeated, None))
    feature = message("Feature", ("bytes_list", 1, T.TYPE_MESSAGE, optional, "BytesList"),
                      ("float_list", 2, T.TYPE_MESSAGE, optional, "FloatList"),
                      ("int64_list", 3, T.TYPE_MESSAGE, optional, "Int64List"))
    feature.oneof_decl.add(name="kind")
    for field in feature.field:
        field.oneof_index = 0
    entry = message("Features", ("feature", 1, T.TYPE_MESSAGE, repeated, "Features.FeatureEntry"))
    map_entry = entry.nested_type.add(name="FeatureEntry")
    map_entry.options.map_entry = True
    map_entry.field.add(name="key", number=1, type=T.TYPE_STRING, label=optional)
    map_entry.field.add(name="value", number=2, type=T.TYPE_MESSAGE, label=optional,
                        type_name=".bert_jax_example.Feature")
    message("Example", ("features", 1, T.TYPE_MESSAGE, optional, "Features"))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("bert_jax_example.Example"))


Example = _example_class()


def serialize_examples(rows: dict) -> List[bytes]:
    """Row dicts of numpy arrays ([N, ...] each) -> serialized tf.train.Examples.

    masked_lm_weights as a float list, every other key as an int64 list."""
    columns = {name: (np.asarray(values).reshape(len(values), -1).tolist(),
                      name == "masked_lm_weights") for name, values in rows.items()}
    serialized = []
    for i in range(len(rows["input_ids"])):
        example = Example()
        feature = example.features.feature
        for name, (values, is_float) in columns.items():
            (feature[name].float_list if is_float else feature[name].int64_list).value.extend(
                values[i])
        # Map entries in key order: otherwise the byte order varies between processes.
        serialized.append(example.SerializeToString(deterministic=True))
    return serialized
