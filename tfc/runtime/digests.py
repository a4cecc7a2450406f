"""SHA-256 digests of the members of artifact and checkpoint zips.

The manifest records the digest of every other member (``"sha256": {member: hex}``), and
loading checks each member it reads against it before using it. A zip member's CRC-32
catches most corruption already, but not all of it: a member rewritten by a tool (or a
person) that recomputed the CRC, a bit flip in memory before the CRC was taken, or a file
assembled from pieces of two saves. Object code that is not what the compiler wrote
crashes the process or computes wrong numbers, so it is linked only once its digest
matches. The digests protect against corruption, not against an attacker, who can
rewrite the manifest as easily as a member (see README.md, "Trust").
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from typing import Any, Mapping

import numpy as np

from tfc.errors import ArtifactError

FIELD = "sha256"
_CHUNK = 1 << 20


class CorruptMember(ArtifactError):
    """A member whose content is not what the manifest's digest says (or has no digest)."""

    def __init__(self, message: str, member: str) -> None:
        super().__init__(message)
        self.member = member


class _HashSink:
    """A write-only file object that only hashes what is written to it."""

    def __init__(self) -> None:
        self.hash = hashlib.sha256()

    def write(self, data: Any) -> int:
        self.hash.update(data)
        return len(memoryview(data).cast("B"))

    def flush(self) -> None:
        pass


def bytes_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def json_digest(value: Any) -> str:
    """The digest of a JSON value, independent of how the manifest was indented."""
    return bytes_digest(json.dumps(value, sort_keys=True, separators=(",", ":")).encode())


def npy_digest(arr: np.ndarray) -> str:
    """The digest of the ``.npy`` file ``np.save(f, arr, allow_pickle=False)`` writes,
    computed without holding that file in memory."""
    sink = _HashSink()
    np.save(sink, arr, allow_pickle=False)
    return sink.hash.hexdigest()


def read_digests(path: Any, manifest: Mapping[str, Any],
                 error: type[ArtifactError] = ArtifactError) -> dict[str, str] | None:
    """The manifest's member digests; None for files written before tfc recorded them."""
    digests = manifest.get(FIELD)
    if digests is None:
        return None
    if not isinstance(digests, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in digests.items()):
        raise error(f"{path}: manifest.json field '{FIELD}' should map member names to "
                    f"SHA-256 digests")
    return digests


def check_member(zf: zipfile.ZipFile, path: Any, member: str,
                 digests: Mapping[str, str] | None, data: bytes | None = None) -> None:
    """Raise ``CorruptMember`` unless ``member`` (its bytes ``data``, else read from
    ``zf`` in chunks) has the digest the manifest records; nothing to check when the
    file records no digests (``digests`` None)."""
    if digests is None:
        return
    try:
        zf.getinfo(member)
    except KeyError:  # the caller says which file it is
        raise KeyError(member) from None
    want = digests.get(member)
    if want is None:
        raise CorruptMember(f"{path}: manifest.json records no SHA-256 for {member}", member)
    if data is None:
        h = hashlib.sha256()
        try:
            with zf.open(member) as fh:
                while chunk := fh.read(_CHUNK):
                    h.update(chunk)
        except OSError as e:  # a bad offset in the zip's directory: a seek fails
            raise CorruptMember(f"{path}: {member} cannot be read, the file is corrupt "
                                f"({e})", member) from None
        got = h.hexdigest()
    else:
        got = bytes_digest(data)
    if got != want.lower():
        raise CorruptMember(f"{path}: {member} is corrupt (its SHA-256 does not match the one "
                            f"manifest.json records)", member)
