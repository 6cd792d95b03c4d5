"""A diagnostics bundle: a gzipped tar with a byte budget, spooled to disk past a megabyte.

The budget (the pool's `maxBytes`) counts uncompressed bytes: every byte read from the leased
cluster, charged as it arrives (cluster_reader.py), kept or not, and every byte of lessor's own
files, charged when added. So a bundle never grows past `maxBytes` however compressible its
contents are, and no read goes uncounted. What does not fit is cut or left out, and
`capture.json` (written last, outside the budget) lists each file with its size, what was cut
or left out and why (a bound), and what could not be read and why (an error).
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
# gzip's own default: 9, tarfile's, costs about four times the CPU (on the operator's event
# loop) for a bundle a few percent smaller.
COMPRESSION = 6
FULL = "cut at maxBytes"
LEFT_OUT = "left out: the bundle is full (maxBytes)"


@dataclass
class Budget:
    """What is left of `maxBytes`."""

    limit: int
    used: int = 0

    @property
    def left(self) -> int:
        return max(0, self.limit - self.used)

    def spend(self, size: int) -> None:
        self.used += size


@dataclass
class Entry:
    name: str
    size: int = 0
    cut: str | None = None  # why a bound cut it short or left it out
    error: str | None = None  # why it could not be read

    def record(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "bytes": self.size}
        if self.cut:
            out["truncated"] = True
            out["cut"] = self.cut
        if self.error:
            out["error"] = self.error
        return out


@dataclass
class BundleWriter:
    max_bytes: int
    budget: Budget = field(init=False)
    entries: list[Entry] = field(default_factory=list)
    file: IO[bytes] = field(
        default_factory=lambda: tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY)  # noqa: SIM115 - closed by close()
    )

    def __post_init__(self) -> None:
        self.budget = Budget(self.max_bytes)
        self._tar = tarfile.open(fileobj=self.file, mode="w:gz", compresslevel=COMPRESSION)  # noqa: SIM115 - closed by finish()

    @property
    def left(self) -> int:
        return self.budget.left

    @property
    def truncated(self) -> bool:
        return any(e.cut for e in self.entries)

    def cuts(self) -> list[str]:
        """Why something was cut or left out, each reason once, in the order first met."""
        return list(dict.fromkeys(e.cut for e in self.entries if e.cut))

    def add(self, name: str, data: bytes) -> None:
        """Add a file of lessor's own: charged now, cut to what is left of the budget."""
        cut = None
        if len(data) > self.left:
            data, cut = data[: self.left], FULL
        self.budget.spend(len(data))
        self.add_read(name, data, cut=cut)

    def add_read(self, name: str, data: bytes, *, cut: str | None = None) -> None:
        """Add what was read from the cluster, as read: it was charged as it arrived."""
        self._write(name, data)
        self.entries.append(Entry(name, len(data), cut))

    def add_json(self, name: str, document: Any) -> None:
        self.add(name, json.dumps(document, indent=1, sort_keys=True).encode())

    def left_out(self, name: str, why: str) -> None:
        """Something a bound kept out of the bundle: only listed, with which bound."""
        self.entries.append(Entry(name, cut=why))

    def failed(self, name: str, error: str) -> None:
        """A file that could not be captured: only listed, with why."""
        self.entries.append(Entry(name, error=error[:1000]))

    def finish(self, manifest: dict[str, Any]) -> IO[bytes]:
        """Write capture.json, close the archive; the file, at its start, for upload."""
        manifest["files"] = [entry.record() for entry in self.entries]
        manifest["truncated"] = self.truncated
        manifest["budgetUsed"] = self.budget.used
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
