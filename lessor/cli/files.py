"""Writing files that hold credentials: private from the first byte, replaced atomically.

A crash or a full disk mid-write leaves the previous file intact (write a sibling, fsync, rename),
and the file is created with mode 0600 instead of being chmod-ed after the secret is in it.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def write_private(path: Path, data: str) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        temporary.replace(path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
