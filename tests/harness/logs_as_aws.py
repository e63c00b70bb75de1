"""CloudWatch Logs' FilterLogEvents as AWS serves it, not as moto does.

moto answers a search at once over everything ever put, in pages of `limit` matching events. AWS
(FilterLogEvents, CloudWatch Logs API Reference) differs in ways a search must survive:

- "Log events are ... searchable ... after they are ingested", and ingestion takes time: an event
  written now may not be found for seconds, sometimes minutes. The emulator hides an event until
  `ingestion_delay_ms` after its ingestion time (0 unless a test sets it).
- "This operation can return empty results while there are more log events available through the
  token": a page may be empty and still carry a nextToken, and pages are capped by count ("The
  maximum number of events to return. The default is 10,000 events") and by size ("up to 1 MB").
  The emulator pages at most `page_events` events (and `limit`, and 1 MB of messages), and, when
  `empty_every` is n > 0, answers every n-th page empty with a token.

A test sets the shape through the control API, `POST /tocsin-logs/shape` with JSON
`{"ingestion_delay_ms": …, "page_events": …, "empty_every": …}` (each optional; `{}` restores
moto's kindness), on moto's own port, not AWS's. The token is the emulator's own (opaque, as AWS's
is); a token from another group, or one that does not parse, answers an empty page with no token,
as moto does.

Usage: `install(backend_class)` once in moto_serial.py; `control(environ)` answers the control API.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

MAX_PAGE_BYTES = 1_048_576
MAX_LIMIT = 10_000

SHAPE: dict[str, int] = {}
PREFIX = "/tocsin-logs/"


def _now_ms() -> int:
    return int(time.time() * 1000)


def _token(group: str, offset: int, page: int) -> str:
    raw = json.dumps({"g": group, "o": offset, "p": page}).encode()
    return base64.urlsafe_b64encode(raw).decode()


def _untoken(token: str, group: str) -> tuple[int, int] | None:
    try:
        d = json.loads(base64.urlsafe_b64decode(token.encode()))
        if d["g"] != group:
            return None
        return int(d["o"]), int(d["p"])
    except Exception:  # noqa: BLE001 - any malformed token is "no such token"
        return None


def install(backend: Any) -> None:
    """Wraps `backend.filter_log_events` (moto's LogsBackend) with AWS's paging and ingestion."""
    original = backend.filter_log_events

    def filter_log_events(
        self: Any,
        log_group_name: str,
        log_stream_names: list[str],
        start_time: int,
        end_time: int,
        limit: int | None,
        next_token: str | None,
        filter_pattern: str,
        interleaved: bool,
    ) -> tuple[list[dict[str, Any]], str | None, list[dict[str, Any]]]:
        if not SHAPE:
            return original(
                self, log_group_name, log_stream_names, start_time, end_time, limit, next_token, filter_pattern, interleaved
            )
        # Everything that matches (moto validates the group and the limit), in time order.
        events, _, searched = original(
            self, log_group_name, log_stream_names, start_time, end_time, MAX_LIMIT, None, filter_pattern, True
        )
        page_no = 0
        offset = 0
        if next_token:
            parsed = _untoken(next_token, log_group_name)
            if parsed is None:
                return [], None, searched
            offset, page_no = parsed
        page_no += 1
        delay = SHAPE.get("ingestion_delay_ms", 0)
        visible = [e for e in events if e.get("ingestionTime", 0) <= _now_ms() - delay]
        empty_every = SHAPE.get("empty_every", 0)
        if empty_every > 0 and page_no % empty_every == 0 and offset < len(visible):
            return [], _token(log_group_name, offset, page_no), searched
        cap = min(limit or MAX_LIMIT, SHAPE.get("page_events") or MAX_LIMIT)
        page: list[dict[str, Any]] = []
        size = 0
        for e in visible[offset:]:
            size += len(e.get("message", "").encode())
            if len(page) >= cap or (page and size > MAX_PAGE_BYTES):
                break
            page.append(e)
        end = offset + len(page)
        token = _token(log_group_name, end, page_no) if end < len(visible) else None
        return page, token, searched

    backend.filter_log_events = filter_log_events


def control(environ: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
    """Answers `POST /tocsin-logs/shape`; None for any other path."""
    path = environ.get("PATH_INFO", "")
    if not path.startswith(PREFIX):
        return None
    if path != PREFIX + "shape" or environ.get("REQUEST_METHOD") != "POST":
        return 404, {"error": f"no control {path}"}
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = json.loads(environ["wsgi.input"].read(length) or b"{}")
    unknown = set(body) - {"ingestion_delay_ms", "page_events", "empty_every"}
    if unknown or not all(isinstance(v, int) and v >= 0 for v in body.values()) or body.get("empty_every") == 1:
        return 400, {
            "error": f"shape takes non-negative integers ingestion_delay_ms, page_events, empty_every (not 1: no page would ever hold an event); got {body}"
        }
    SHAPE.clear()
    SHAPE.update({k: v for k, v in body.items() if v})
    return 200, {"shape": dict(SHAPE)}


def reset() -> None:
    SHAPE.clear()
