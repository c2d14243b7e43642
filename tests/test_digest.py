"""kiln.core.digest: the same SHA-256 digests as hashlib, small inputs (CPython's module) and
large ones (OpenSSL's) alike."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from kiln.core import digest


@pytest.mark.parametrize("size", [0, 1, 63, 64, 4096, digest.LARGE_BYTES - 1, digest.LARGE_BYTES])
def test_hexdigest_matches_hashlib(size):
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    assert digest.hexdigest(data) == hashlib.sha256(data).hexdigest()


def test_text_is_hashed_as_utf8_and_streaming_matches():
    text = "kir π 2 · 3"
    assert digest.hexdigest(text) == hashlib.sha256(text.encode("utf-8")).hexdigest()
    streamed = digest.sha256()
    for part in (b"kiln", b"\0", text.encode()):
        streamed.update(part)
    assert streamed.hexdigest() == hashlib.sha256(b"kiln\0" + text.encode()).hexdigest()
