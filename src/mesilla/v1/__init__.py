"""Typed Mesos v1 API messages (the JSON mapping of `include/mesos/v1/*.proto`).

Messages are msgspec Structs: snake_case fields as in the .proto files, enums as
their name strings, `bytes` as base64, unknown fields ignored, defaults omitted
on output. Decode once at the HTTP boundary with `mesilla.v1.codec`.
"""
