"""Protobuf's JSON mapping with 64-bit integers as JSON numbers.

The mapping writes int64/uint64 as strings (for JavaScript's doubles), which every script reading
`report --json` had to undo; Python's json, jq and most readers take any integer exactly.
"""
from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import FieldDescriptor

_INT64 = (FieldDescriptor.CPPTYPE_INT64, FieldDescriptor.CPPTYPE_UINT64)


def with_int64_numbers(descriptor: Any, value: dict[str, Any]) -> dict[str, Any]:
    """`value` (the JSON mapping of a message of `descriptor`), its 64-bit integers made numbers in place."""
    for field in descriptor.fields:
        if field.json_name not in value:
            continue
        item = value[field.json_name]
        items = item if field.is_repeated else [item]
        if field.cpp_type in _INT64:
            converted = [int(v) for v in items]
            value[field.json_name] = converted if field.is_repeated else converted[0]
        elif field.message_type is not None:
            for sub in items:
                with_int64_numbers(field.message_type, sub)
    return value
