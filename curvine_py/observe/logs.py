"""One logging setup for every role (master, worker, mount, csi): one line per event on stderr,
stamped with the role and the node (and the worker id once known), as text for people or as JSON
for log shippers (`--log-format json`, env CURVINE_LOG_FORMAT).

A JSON line has fixed keys: `ts` (RFC 3339, UTC, milliseconds), `level`, `role`, `node`, `logger`,
`msg`, and `worker_id` / `exc` when set. Levels mean: ERROR something lost or refused that an
operator must act on; WARNING degraded but served (a replica lost, a fallback taken); INFO a
lifecycle step; DEBUG per-request detail (a cache miss is DEBUG, never a warning).
"""
from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import sys
from typing import Literal

LogFormat = Literal["text", "json"]
FORMATS: tuple[LogFormat, ...] = ("text", "json")
ENV_FORMAT = "CURVINE_LOG_FORMAT"


class RoleTag(logging.Filter):
    """Stamps role, node and (once registered) worker id on every record."""

    def __init__(self, role: str, node: str) -> None:
        super().__init__()
        self.role = role
        self.node = node
        self.worker_id = ""

    def filter(self, record: logging.LogRecord) -> bool:
        record.role = self.role
        record.node = self.node
        record.worker_id = self.worker_id
        return True


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(role)s node=%(node)s%(worker)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        worker_id = getattr(record, "worker_id", "")
        record.worker = f" worker={worker_id}" if worker_id else ""
        return super().format(record)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
        line: dict[str, str] = {
            "ts": stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "role": str(getattr(record, "role", "")),
            "node": str(getattr(record, "node", "")),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        worker_id = getattr(record, "worker_id", "")
        if worker_id:
            line["worker_id"] = str(worker_id)
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def parse_format(value: str | None) -> LogFormat:
    chosen = (value or os.environ.get(ENV_FORMAT) or "text").lower()
    if chosen == "json":
        return "json"
    if chosen == "text":
        return "text"
    raise ValueError(f"log format {chosen!r}: expected one of {', '.join(FORMATS)}")


def add_log_format_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-format", choices=FORMATS,
                        help=f"log lines as text or one JSON object each (env {ENV_FORMAT}; default text)")


def setup_logging(role: str, node: str, level: str, log_format: str | None = None) -> RoleTag:
    """Replaces the root logger's handlers with one stderr handler in the chosen format; returns
    the tag so a worker can add its id once registered."""
    tag = RoleTag(role, node)
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(tag)
    handler.setFormatter(JsonFormatter() if parse_format(log_format) == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    return tag
