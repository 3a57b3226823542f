"""The execution cache: one JSON entry per document, named by its key.

Entries are written atomically (a temporary file, then ``os.replace``) and carry a
checksum of their payload, so a truncated or edited entry is detected and the document
re-runs rather than rendering it. Failed runs are never stored. Each page keeps its
``KEEP`` most recently used entries, so switching to another branch and back runs nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from .model import DocResult

KEEP = 4  # entries per page: the current key and a few others recently built


def _slug(docname: str) -> str:
    return docname.replace("/", "--")


class ExecutionCache:
    def __init__(self, root: Path):
        self.root = Path(root)

    def _path(self, docname: str, key: str) -> Path:
        return self.root / f"{_slug(docname)}.{key}.json"

    def load(self, docname: str, key: str) -> DocResult | None:
        """The stored result, or None if missing, corrupt or for another key."""
        path = self._path(docname, key)
        try:
            envelope = json.loads(path.read_text(encoding="utf-8"))
            payload = envelope["payload"]
            if envelope["sha256"] != _digest(payload):
                raise ValueError("checksum mismatch")
            result = DocResult.from_json(payload)
        except OSError:  # not there, or the cache folder cannot be read: run the page
            return None
        except (ValueError, KeyError, TypeError, json.JSONDecodeError):
            path.unlink(missing_ok=True)
            return None
        if result.key != key or result.docname != docname or result.failed:
            return None
        os.utime(path)  # used now: the last to go when the page's entries are pruned
        return result

    def store(self, result: DocResult) -> None:
        if result.failed:
            return
        self.root.mkdir(parents=True, exist_ok=True)
        payload = result.to_json()
        envelope = {"sha256": _digest(payload), "payload": payload}
        target = self._path(result.docname, result.key)
        handle, temporary = tempfile.mkstemp(dir=self.root, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as stream:
                json.dump(envelope, stream)
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        entries = sorted(self.root.glob(f"{_slug(result.docname)}.*.json"),
                         key=_last_used, reverse=True)
        for stale in entries[KEEP:]:
            if stale != target:
                stale.unlink(missing_ok=True)


def _last_used(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


def _digest(payload: dict) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
