"""The binary form of ``ChunkCreated`` (schema version 2) and the embedder's lean reader of both versions.

Version 1 is a JSON object (pydantic's ``ChunkCreated``): the text and the token ids (a base64 field) are
parsed and validated as JSON on every record, though the embedder uses the ids and ignores the text when
they are its model's. Version 2 frames the same event as bytes::

    offset  size  what
    0       4     magic b"\\x00ECC" (a JSON body never starts with NUL: the two versions are told apart here)
    4       2     schema version, little-endian uint16 (2)
    6       1     bytes per token id: 0 (no ids), 2 (uint16) or 4 (uint32), little-endian
    7       1     reserved (0)
    8       4     length of the metadata, little-endian uint32
    12      4     number of token ids, little-endian uint32
    16      m     metadata: UTF-8 JSON of every other field of ``ChunkCreated`` (``schema_version`` 2, no
                  ``text``, ``token_ids`` nor ``token_ids_u32``)
    16+m    n*w   the token ids
    ...     rest  the text, UTF-8

so a reader takes the ids as one numpy view of the record's bytes, parses only the small metadata, and
decodes the text only when it needs it. :func:`encode_chunk` writes it (the parser), :func:`read_chunk`
reads either version into a :class:`WireChunk` (the embedder); a malformed record raises ``ValueError``
naming what is wrong (the caller dead-letters that record alone). :func:`to_event` turns a version-2
record back into a validated ``ChunkCreated`` for any other reader.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np
import numpy.typing as npt

from shared.events import ChunkCreated

MAGIC = b"\x00ECC"
VERSION = 2
_HEADER = struct.Struct("<4sHBBII")
_BINARY_ONLY = ("text", "token_ids", "token_ids_u32")
_ID_DTYPES: dict[int, np.dtype[Any]] = {2: np.dtype("<u2"), 4: np.dtype("<u4")}

Ids = npt.NDArray[np.uint16] | npt.NDArray[np.uint32] | npt.NDArray[np.int64]


def id_width(ids: npt.NDArray[Any]) -> int:
    """Bytes per id for ``ids``: 2 when every id fits a uint16 (BERT vocabularies), else 4."""
    if not len(ids):
        return 0
    if int(ids.min()) < 0 or int(ids.max()) >= 1 << 32:
        raise ValueError("token ids must lie in 0 .. 2**32-1")
    return 2 if int(ids.max()) < 1 << 16 else 4


def encode_chunk(event: ChunkCreated, ids: npt.ArrayLike | None = None) -> bytes:
    """Version-2 bytes of ``event`` with ``ids`` (or the ids the event carries) as the token ids."""
    if ids is None:
        shipped = event.input_ids()
        ids = shipped if shipped is not None else ()
    array = np.asarray(ids, dtype=np.int64)
    width = id_width(array)
    meta = event.model_dump(mode="json", exclude_none=True, exclude=set(_BINARY_ONLY))
    meta["schema_version"] = VERSION
    if not width:
        meta.pop("token_model", None)
    head = json.dumps(meta, ensure_ascii=False, separators=(",", ":")).encode()
    packed = array.astype(_ID_DTYPES[width]).tobytes() if width else b""
    return _HEADER.pack(MAGIC, VERSION, width, 0, len(head), len(array)) + head + packed + event.text.encode()


def is_binary(body: bytes) -> bool:
    """Whether ``body`` is the version-2 binary form (else it is taken for version-1 JSON)."""
    return body[:4] == MAGIC


class WireChunk:
    """What the embedder needs of one ``ChunkCreated``, read without pydantic: ids, keys and the text on demand."""

    __slots__ = ("_ids", "_text", "chunk_id", "document_id", "job_id", "target_model", "token_model", "trace_id")

    def __init__(
        self,
        trace_id: str,
        chunk_id: str,
        document_id: str,
        job_id: str | None,
        token_model: str | None,
        target_model: str | None,
        ids: Ids | None,
        text: str | bytes,
    ) -> None:
        self.trace_id = trace_id
        self.chunk_id = chunk_id
        self.document_id = document_id
        self.job_id = job_id
        self.token_model = token_model
        self.target_model = target_model
        self._ids = ids
        self._text = text

    @property
    def text(self) -> str:
        """The embedding text (decoded from UTF-8 on first use: the embedder needs it only without ids)."""
        if isinstance(self._text, bytes):
            self._text = self._text.decode("utf-8")
        return self._text

    def input_ids(self) -> Ids | None:
        """The shipped token ids (read-only), or None when there are none."""
        return self._ids

    @classmethod
    def of_event(cls, event: ChunkCreated) -> WireChunk:
        """The chunk of a validated version-1 event."""
        return cls(
            event.trace_id,
            event.chunk_id,
            event.document_id,
            event.job_id,
            event.token_model,
            event.target_model,
            event.input_ids(),
            event.text,
        )


def _split(body: bytes) -> tuple[dict[str, Any], memoryview, int, int, int]:
    """(metadata, body, id width, id count, offset of the ids) of a version-2 record; ValueError if malformed."""
    if len(body) < _HEADER.size:
        raise ValueError(f"a binary ChunkCreated of {len(body)} bytes is shorter than its {_HEADER.size}-byte header")
    _, version, width, _, meta_len, count = _HEADER.unpack_from(body)
    if version != VERSION:
        raise ValueError(f"binary ChunkCreated schema_version {version} is not known (this reader knows {VERSION})")
    if width not in (0, 2, 4) or (width == 0) != (count == 0):
        raise ValueError(f"binary ChunkCreated: {count} token ids of {width} bytes each")
    start = _HEADER.size + meta_len
    if start + width * count > len(body):
        raise ValueError(f"binary ChunkCreated of {len(body)} bytes is shorter than its header says")
    try:
        meta = json.loads(bytes(memoryview(body)[_HEADER.size : start]))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"binary ChunkCreated metadata is not JSON: {exc}") from exc
    if not isinstance(meta, dict):
        raise ValueError("binary ChunkCreated metadata is not a JSON object")
    if meta.get("schema_version") != VERSION:
        raise ValueError(f"binary ChunkCreated metadata says schema_version {meta.get('schema_version')!r}")
    return meta, memoryview(body), width, count, start


def _text_field(meta: dict[str, Any], name: str, *, required: bool) -> str | None:
    value = meta.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise ValueError(f"binary ChunkCreated: `{name}` must be a non-empty string, not {value!r}")
    return value


def read_chunk(body: bytes) -> WireChunk:
    """The chunk of a ``chunks.created`` record, either version; ``ValueError`` when it is malformed."""
    if not is_binary(body):
        return WireChunk.of_event(ChunkCreated.model_validate_json(body))
    meta, view, width, count, start = _split(body)
    end = start + width * count
    ids = np.frombuffer(body, dtype=_ID_DTYPES[width], count=count, offset=start) if count else None
    if end >= len(view):
        raise ValueError("binary ChunkCreated has no text")
    trace_id = _text_field(meta, "trace_id", required=True)
    chunk_id = _text_field(meta, "chunk_id", required=True)
    document_id = _text_field(meta, "document_id", required=True)
    assert trace_id is not None and chunk_id is not None and document_id is not None
    return WireChunk(
        trace_id,
        chunk_id,
        document_id,
        _text_field(meta, "job_id", required=False),
        _text_field(meta, "token_model", required=False),
        _text_field(meta, "target_model", required=False),
        ids,
        body[end:],
    )


def to_event(body: bytes) -> ChunkCreated:
    """A validated ``ChunkCreated`` of either version (the ids as ``token_ids_u32``); ValueError if malformed."""
    if not is_binary(body):
        return ChunkCreated.model_validate_json(body)
    meta, view, width, count, start = _split(body)
    end = start + width * count
    fields = {**meta, "text": bytes(view[end:]).decode("utf-8")}
    if count:
        ids = np.frombuffer(body, dtype=_ID_DTYPES[width], count=count, offset=start)
        fields["token_ids_u32"] = ChunkCreated.pack_ids(ids)
    return ChunkCreated.model_validate(fields)
