"""One writer at a time for what a data option builds on disk (a download, a frame cache).

Every rank of a run calls its data builder; the first to take the lock builds, the others wait
and then find it built. `fcntl.flock` on a file beside the data: ranks on one node, and on
several nodes of a filesystem with locks (NFSv4, Lustre; Linux emulates flock over NFS locks).
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def held(path: Path) -> Iterator[None]:
    """Blocks until this process holds the lock file `path` (created if missing); released on
    exit, or by the kernel when the process dies (a killed rank never leaves it held)."""
    with open(path, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
