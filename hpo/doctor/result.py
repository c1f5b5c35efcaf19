"""A checklist entry: pass / warn / fail / skip, a one-line reason, and what to do."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Status = Literal["pass", "warn", "fail", "skip"]
MARK = {"pass": "PASS", "warn": "WARN", "fail": "FAIL", "skip": "SKIP"}


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    reason: str
    fix: str = ""

    def line(self) -> str:
        tail = f" → {self.fix}" if self.fix and self.status in ("warn", "fail") else ""
        return f"[{MARK[self.status]}] {self.name}: {self.reason}{tail}"
