"""A diagnostics bundle: a gzipped tar with a byte budget, spooled to disk past a megabyte.

The budget counts uncompressed bytes (what a reader unpacks), so a bundle never grows past the
pool's `maxBytes` however compressible its contents are; a file that does not fit is cut or
left out, and `capture.json` (written last, outside the budget) lists each with its size, whether
it was cut, and why something is missing.
"""

from __future__ import annotations

import io
import json
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from typing import IO, Any

SPOOL_IN_MEMORY = 1024 * 1024


@dataclass
class Entry:
    name: str
    size: int = 0
    truncated: bool = False
    error: str | None = None

    def record(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "bytes": self.size}
        if self.truncated:
            out["truncated"] = True
        if self.error:
            out["error"] = self.error
        return out


@dataclass
class BundleWriter:
    max_bytes: int
    entries: list[Entry] = field(default_factory=list)
    used: int = 0
    file: IO[bytes] = field(
        default_factory=lambda: tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY)  # noqa: SIM115 - closed by close()
    )

    def __post_init__(self) -> None:
        self._tar = tarfile.open(fileobj=self.file, mode="w:gz")  # noqa: SIM115 - closed by finish()

    @property
    def left(self) -> int:
        return max(0, self.max_bytes - self.used)

    @property
    def truncated(self) -> bool:
        return any(e.truncated for e in self.entries)

    def add(self, name: str, data: bytes, *, truncated: bool = False) -> None:
        """Add a file, cut to what is left of the budget (marked truncated when cut)."""
        if len(data) > self.left:
            data, truncated = data[: self.left], True
        self._write(name, data)
        self.used += len(data)
        self.entries.append(Entry(name, len(data), truncated))

    def add_json(self, name: str, document: Any, *, truncated: bool = False) -> None:
        self.add(name, json.dumps(document, indent=1, sort_keys=True).encode(), truncated=truncated)

    def failed(self, name: str, error: str) -> None:
        """A file that could not be captured: only listed, with why."""
        self.entries.append(Entry(name, error=error[:1000]))

    def finish(self, manifest: dict[str, Any]) -> IO[bytes]:
        """Write capture.json, close the archive; the file, at its start, for upload."""
        manifest["files"] = [entry.record() for entry in self.entries]
        manifest["truncated"] = self.truncated
        self._write("capture.json", json.dumps(manifest, indent=1, sort_keys=True).encode())
        self._tar.close()
        self.file.seek(0)
        return self.file

    def size(self) -> int:
        position = self.file.tell()
        self.file.seek(0, io.SEEK_END)
        end = self.file.tell()
        self.file.seek(position)
        return end

    def close(self) -> None:
        self._tar.close()
        self.file.close()

    def _write(self, name: str, data: bytes) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
        self._tar.addfile(info, io.BytesIO(data))
