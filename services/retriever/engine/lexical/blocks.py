"""The packed posting format of the lexical index's blocks (``bm25_blocks``): what the store's triggers write and
the lexical leg and its cache read."""

from __future__ import annotations

import numpy as np

#: One posting as the store packs it (``bm25_add`` in the store's migrations): 11 bytes, big-endian; the one-byte
#: fields are capped at 255, ``len_text`` at 65535.
POSTING = np.dtype(
    [
        ("key", ">i4"),
        ("tf_text", "u1"),
        ("tf_title", "u1"),
        ("tf_section", "u1"),
        ("len_text", ">u2"),
        ("len_title", "u1"),
        ("len_section", "u1"),
    ]
)
