"""TensorBoard's event messages without TensorFlow: what a scalar summary writes.

The fields of TensorFlow's event.proto, summary.proto, tensor.proto and tensor_shape.proto that
`tf.summary.scalar` fills (same numbers, proto3), built at import with `protobuf` alone; a test
compares the bytes with TensorFlow's. `DataType` is an enum there, an int32 here: the same bytes.
"""
from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

DT_FLOAT = 1  # tensorflow/core/framework/types.proto

_T = descriptor_pb2.FieldDescriptorProto
_PACKAGE = "bert_jax_event"
_MESSAGES = {  # name: ((field, number, type, repeated, message type), ...)
    "PluginData": (("plugin_name", 1, _T.TYPE_STRING, False, None),
                   ("content", 2, _T.TYPE_BYTES, False, None)),
    "SummaryMetadata": (("plugin_data", 1, _T.TYPE_MESSAGE, False, "PluginData"),),
    "TensorShapeProto": (("unknown_rank", 3, _T.TYPE_BOOL, False, None),),
    "TensorProto": (("dtype", 1, _T.TYPE_INT32, False, None),
                    ("tensor_shape", 2, _T.TYPE_MESSAGE, False, "TensorShapeProto"),
                    ("float_val", 5, _T.TYPE_FLOAT, True, None)),
    "Value": (("tag", 1, _T.TYPE_STRING, False, None),
              ("tensor", 8, _T.TYPE_MESSAGE, False, "TensorProto"),
              ("metadata", 9, _T.TYPE_MESSAGE, False, "SummaryMetadata")),
    "Summary": (("value", 1, _T.TYPE_MESSAGE, True, "Value"),),
    "Event": (("wall_time", 1, _T.TYPE_DOUBLE, False, None),
              ("step", 2, _T.TYPE_INT64, False, None),
              ("file_version", 3, _T.TYPE_STRING, False, None),
              ("summary", 5, _T.TYPE_MESSAGE, False, "Summary")),
}


def _classes() -> dict:
    file = descriptor_pb2.FileDescriptorProto(name="bert_jax_event.proto", package=_PACKAGE,
                                              syntax="proto3")
    for name, fields in _MESSAGES.items():
        message = file.message_type.add(name=name)
        for field_name, number, kind, repeated, type_name in fields:
            field = message.field.add(
                name=field_name, number=number, type=kind,
                label=_T.LABEL_REPEATED if repeated else _T.LABEL_OPTIONAL)
            if type_name:
                field.type_name = f".{_PACKAGE}.{type_name}"
        if name == "Event":  # file_version and summary are one `what` in event.proto
            message.oneof_decl.add(name="what")
            for field in message.field[2:]:
                field.oneof_index = 0
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{name}"))
            for name in _MESSAGES}


_CLASSES = _classes()
Event, Summary = _CLASSES["Event"], _CLASSES["Summary"]


def file_version_event(wall_time: float) -> bytes:
    """The first event of an event file."""
    return Event(wall_time=wall_time, file_version="brain.Event:2").SerializeToString()


def scalar_event(wall_time: float, step: int, tag: str, value: float) -> bytes:
    """One scalar event, as `tf.summary.scalar` records it.

    A float tensor with the scalars plugin's metadata."""
    summary = Summary(value=[{"tag": tag, "tensor": {"dtype": DT_FLOAT, "tensor_shape": {},
                                                     "float_val": [value]},
                              "metadata": {"plugin_data": {"plugin_name": "scalars"}}}])
    return Event(wall_time=wall_time, step=step, summary=summary).SerializeToString()
