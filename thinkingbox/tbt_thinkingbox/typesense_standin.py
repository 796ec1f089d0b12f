"""A lexical stand-in for the part of Typesense's HTTP API that dataset tool servers call.

The ThinkingBox-Bench servers keep their knowledge base (the `search_policy` tools) in a Typesense server:
one collection per session, filled document by document at `__reserved__init`, searched with `multi_search`
and dropped at teardown. Typesense is a separate server binary no package registry here ships; this answers
the same requests with SQLite FTS5 (in Python's standard library) ranking by BM25.

Lexical only: Typesense's `ts/e5-small` embeddings and hybrid ranking are not reproduced. Queries are split
into words, matched as OR terms (the last one as a prefix), ranked by BM25 over the collection; the `embedding`
field in `query_by` is ignored. What a policy-following agent finds can differ from real Typesense; the
database state a task grades never depends on it (the knowledge base is read-only).

Endpoints: GET /health; POST /collections; GET and DELETE /collections/{name}; POST
/collections/{name}/documents (one document); POST /collections/{name}/documents/import (JSON lines);
GET /collections/{name}/documents/search; POST /multi_search. Supported search parameters: q, query_by,
filter_by (`field:=value` joined by `||` or `&&`), group_by (one field), group_limit, per_page, page,
highlight_start_tag, highlight_end_tag, highlight_affix_num_tokens. Requests need the X-TYPESENSE-API-KEY
header (or the api key query parameter) equal to --api-key.

Caps (third review, finding 12): the stand-in is one process shared by every sandbox on the machine, outside
their limits, so what one dataset stores here is capped: the request body (8 MiB; bodies in flight together
4 x that), documents per import (10,000), documents and bytes per collection (10,000 and 16 MiB), collections
(1,000) and bytes in all collections (128 MiB). Bytes are those of each stored document's JSON and indexed
text. Over a cap the request is answered 413 (a collection more: 422) with a message naming the cap, its flag
and the TBT_ variable `tbt up` reads it from (infra/typesense-standin.ts); an import past a collection cap
stores the lines before it and answers each later line with that error. Search answers keep Typesense's own
limits: per_page <= 250, 50 searches per multi_search, and answers of at most the body cap.

Run: python -m tbt_thinkingbox.typesense_standin --port 8108 --api-key Fake
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

WORD = re.compile(r"\w+", re.UNICODE)
MiB = 1024 * 1024
# Typesense's own limits on a search answer (per_page, searches in one multi_search).
MAX_PER_PAGE = 250
MAX_MULTI_SEARCHES = 50
# Bytes of a refused body still read (and discarded) so the client gets the answer; past it the connection closes.
DRAIN_MAX = 1024 * MiB


@dataclass(frozen=True)
class Caps:
    """What one dataset may make the shared stand-in hold; each cap's flag and variable are named in its error."""

    body_bytes: int = 8 * MiB
    import_documents: int = 10_000
    collection_documents: int = 10_000
    collection_bytes: int = 16 * MiB
    collections: int = 1_000
    total_bytes: int = 128 * MiB


def cap_name(flag: str) -> str:
    """`--max-body-mb, TBT_TYPESENSE_MAX_BODY_MB`: where an operator sets a cap."""
    return f"{flag}, TBT_TYPESENSE_{flag[2:].replace('-', '_').upper()}"


def mib(n: int) -> str:
    return f"{n / MiB:g} MiB"


class ApiError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class BodyBudget:
    """Bytes of request bodies held at once (bodies wait their turn), so concurrent requests stay bounded too."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.cond = threading.Condition()

    def acquire(self, n: int, timeout: float = 60.0) -> None:
        with self.cond:
            if not self.cond.wait_for(lambda: self.used + n <= self.limit, timeout):
                raise ApiError(503, "the stand-in is busy reading other request bodies; retry")
            self.used += n

    def release(self, n: int) -> None:
        with self.cond:
            self.used -= n
            self.cond.notify_all()


class Store:
    """Collections in one in-memory SQLite database: a documents table and an FTS5 index per collection."""

    def __init__(self, caps: Caps | None = None) -> None:
        self.db = sqlite3.connect(":memory:", check_same_thread=False)
        # Reentrant: a search holds it throughout (its rows are parsed one search at a time).
        self.lock = threading.RLock()
        self.caps = caps or Caps()
        self.collections: dict[str, dict[str, Any]] = {}
        self.tables: dict[str, str] = {}
        # Per table: [documents, bytes]; and bytes in all tables.
        self.usage: dict[str, list[int]] = {}
        self.total_bytes = 0
        self.counter = 0

    def _table(self, name: str) -> str:
        if name not in self.tables:
            raise ApiError(404, f"Collection `{name}` not found.")
        return self.tables[name]

    def create(self, schema: dict[str, Any]) -> dict[str, Any]:
        name = schema.get("name")
        if not isinstance(name, str) or not name:
            raise ApiError(400, "Parameter `name` is required.")
        with self.lock:
            if name in self.collections:
                raise ApiError(409, f"A collection with name `{name}` already exists.")
            if len(self.collections) >= self.caps.collections:
                raise ApiError(
                    422,
                    f"The stand-in holds {len(self.collections)} collections, the stand-in's cap "
                    f"({cap_name('--max-collections')}); drop one first.",
                )
            self.counter += 1
            table = f"c{self.counter}"
            self.db.execute(
                f"CREATE TABLE {table}_docs (rowid INTEGER PRIMARY KEY, id TEXT UNIQUE, doc TEXT, size INTEGER)"
            )
            self.db.execute(f"CREATE VIRTUAL TABLE {table}_fts USING fts5(body, tokenize='porter unicode61')")
            self.tables[name] = table
            self.usage[table] = [0, 0]
            info = {
                "name": name,
                "fields": schema.get("fields", []),
                "created_at": int(time.time()),
                "num_documents": 0,
                "default_sorting_field": schema.get("default_sorting_field", ""),
            }
            self.collections[name] = info
            return info

    def retrieve(self, name: str) -> dict[str, Any]:
        with self.lock:
            table = self._table(name)
            count = self.db.execute(f"SELECT count(*) FROM {table}_docs").fetchone()[0]
            return {**self.collections[name], "num_documents": count}

    def delete(self, name: str) -> dict[str, Any]:
        info = self.retrieve(name)
        with self.lock:
            table = self.tables.pop(name)
            self.collections.pop(name)
            self.total_bytes -= self.usage.pop(table)[1]
            self.db.execute(f"DROP TABLE {table}_docs")
            self.db.execute(f"DROP TABLE {table}_fts")
        return info

    def add(self, name: str, doc: dict[str, Any], action: str = "create") -> dict[str, Any]:
        if not isinstance(doc, dict):
            raise ApiError(400, "Bad JSON: a document must be an object.")
        with self.lock:
            table = self._table(name)
            doc = dict(doc)
            doc_id = str(doc.get("id") or f"auto{self.counter}_{time.monotonic_ns()}")
            doc["id"] = doc_id
            row = self.db.execute(f"SELECT rowid, size FROM {table}_docs WHERE id = ?", (doc_id,)).fetchone()
            if row and action == "create":
                raise ApiError(409, f"A document with id {doc_id} already exists.")
            body = " ".join(str(v) for k, v in doc.items() if isinstance(v, str) and k != "id")
            doc_json = json.dumps(doc)
            size = len(doc_json.encode()) + len(body.encode())
            self._check_room(name, table, size - (row[1] if row else 0), 0 if row else 1)
            if row:
                self.db.execute(f"DELETE FROM {table}_fts WHERE rowid = ?", (row[0],))
                self.db.execute(f"DELETE FROM {table}_docs WHERE rowid = ?", (row[0],))
            cur = self.db.execute(
                f"INSERT INTO {table}_docs (id, doc, size) VALUES (?, ?, ?)", (doc_id, doc_json, size)
            )
            self.db.execute(f"INSERT INTO {table}_fts (rowid, body) VALUES (?, ?)", (cur.lastrowid, body))
            usage = self.usage[table]
            usage[0] += 0 if row else 1
            usage[1] += size - (row[1] if row else 0)
            self.total_bytes += size - (row[1] if row else 0)
            return doc

    def _check_room(self, name: str, table: str, more_bytes: int, more_docs: int) -> None:
        """413 naming the cap when a document would take the collection or the stand-in past one."""
        docs, size = self.usage[table]
        caps = self.caps
        if docs + more_docs > caps.collection_documents:
            raise ApiError(
                413,
                f"Collection `{name}` holds {docs} documents, the stand-in's cap of {caps.collection_documents} "
                f"documents per collection ({cap_name('--max-collection-documents')}).",
            )
        if size + more_bytes > caps.collection_bytes:
            raise ApiError(
                413,
                f"Collection `{name}` holds {size} bytes; {more_bytes} more would pass the stand-in's cap of "
                f"{mib(caps.collection_bytes)} per collection ({cap_name('--max-collection-mb')}).",
            )
        if self.total_bytes + more_bytes > caps.total_bytes:
            raise ApiError(
                413,
                f"The stand-in holds {self.total_bytes} bytes; {more_bytes} more would pass its cap of "
                f"{mib(caps.total_bytes)} in all collections ({cap_name('--max-total-mb')}).",
            )

    def search(self, params: dict[str, Any]) -> dict[str, Any]:
        # One search at a time: the matching documents are parsed whole, so their memory is one collection's.
        with self.lock:
            return self._search(params)

    def _search(self, params: dict[str, Any]) -> dict[str, Any]:
        started = time.monotonic()
        name = params.get("collection")
        if not isinstance(name, str):
            raise ApiError(400, "Parameter `collection` is required.")
        q = str(params.get("q", ""))
        per_page = int(params.get("per_page", 10))
        if per_page > MAX_PER_PAGE:
            raise ApiError(422, f"Only upto {MAX_PER_PAGE} hits can be fetched per page.")
        page = max(1, int(params.get("page", 1)))
        group_by = str(params.get("group_by") or "").strip()
        group_limit = int(params.get("group_limit", 3))
        fields = [f.strip() for f in str(params.get("query_by", "text")).split(",") if f.strip()]
        text_fields = [f for f in fields if f != "embedding"] or ["text"]
        start_tag = str(params.get("highlight_start_tag", "<mark>"))
        end_tag = str(params.get("highlight_end_tag", "</mark>"))
        affix = int(params.get("highlight_affix_num_tokens", 4))
        filters = parse_filter(str(params.get("filter_by") or ""))
        table = self._table(name)
        total = self.db.execute(f"SELECT count(*) FROM {table}_docs").fetchone()[0]
        rows = self._match(table, q)
        hits = []
        terms = [t.lower() for t in WORD.findall(q)] if q.strip() != "*" else []
        for doc_json, score in rows:
            doc = json.loads(doc_json)
            if not filters(doc):
                continue
            hit: dict[str, Any] = {
                "document": doc,
                "text_match": int(max(0.0, -score) * 1_000_000),
                "text_match_info": {"score": str(int(max(0.0, -score) * 1_000_000))},
                "highlights": [],
                "highlight": {},
            }
            for f in text_fields:
                value = doc.get(f)
                if isinstance(value, str) and terms:
                    snippet, matched = highlight(value, terms, start_tag, end_tag, affix)
                    if matched:
                        hit["highlights"].append(
                            {"field": f, "snippet": snippet, "snippets": [snippet], "matched_tokens": matched}
                        )
                        hit["highlight"][f] = {"snippet": snippet, "matched_tokens": matched}
            hits.append(hit)
        result: dict[str, Any] = {
            "facet_counts": [],
            "out_of": total,
            "page": page,
            "request_params": {"collection_name": name, "per_page": per_page, "q": q},
            "search_cutoff": False,
        }
        first = (page - 1) * per_page
        if group_by:
            groups: dict[str, list[dict[str, Any]]] = {}
            for hit in hits:
                key = json.dumps(hit["document"].get(group_by))
                groups.setdefault(key, []).append(hit)
            ordered = list(groups.items())
            result["found"] = len(ordered)
            result["found_docs"] = len(hits)
            result["grouped_hits"] = [
                {"group_key": [json.loads(k)], "hits": g[:group_limit], "found": len(g)}
                for k, g in ordered[first : first + per_page]
            ]
            result["hits"] = []
        else:
            result["found"] = len(hits)
            result["hits"] = hits[first : first + per_page]
        result["search_time_ms"] = int((time.monotonic() - started) * 1000)
        returned = [h for g in result.get("grouped_hits", []) for h in g["hits"]] + result["hits"]
        size = sum(len(json.dumps(h)) for h in returned)
        if size > self.caps.body_bytes:
            raise ApiError(
                413,
                f"The answer would be {size} bytes, over the stand-in's cap of {mib(self.caps.body_bytes)} "
                f"({cap_name('--max-body-mb')}); ask for fewer hits.",
            )
        return result

    def _match(self, table: str, q: str) -> list[tuple[str, float]]:
        if q.strip() == "*":
            return [(d, 0.0) for (d,) in self.db.execute(f"SELECT doc FROM {table}_docs ORDER BY rowid")]
        words = WORD.findall(q)
        if not words:
            return []
        # OR of the words, the last one as a prefix (Typesense matches prefixes of the last word by default).
        terms = [f'"{w}"' for w in words[:-1]] + [f'"{words[-1]}"*']
        sql = (
            f"SELECT d.doc, bm25({table}_fts) AS score FROM {table}_fts JOIN {table}_docs d "
            f"ON d.rowid = {table}_fts.rowid WHERE {table}_fts MATCH ? ORDER BY score, d.rowid"
        )
        return list(self.db.execute(sql, (" OR ".join(terms),)))


def parse_filter(expr: str):
    """`field:=value` / `field:value` terms joined by `||` or `&&` (no parentheses); anything else is a 400."""
    expr = expr.strip()
    if not expr:
        return lambda doc: True
    ors = []
    for alternative in expr.split("||"):
        ands = []
        for term in alternative.split("&&"):
            m = re.fullmatch(r"\s*(\w+)\s*:=?\s*(.+?)\s*", term)
            if not m:
                raise ApiError(400, f"Could not parse the filter query: {expr}")
            value = m.group(2)
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "`'\"":
                value = value[1:-1]
            ands.append((m.group(1), value))
        ors.append(ands)
    return lambda doc: any(all(str(doc.get(f)) == v for f, v in ands) for ands in ors)


def highlight(text: str, terms: list[str], start: str, end: str, affix: int) -> tuple[str, list[str]]:
    """The text around the first matched word, `affix` words either side, matches wrapped in the tags."""
    tokens = list(WORD.finditer(text))
    matched_at = [i for i, t in enumerate(tokens) if any(t.group().lower().startswith(w) for w in terms)]
    if not matched_at:
        return "", []
    first, last = max(0, matched_at[0] - affix), min(len(tokens) - 1, matched_at[0] + affix)
    out, pos = [], tokens[first].start()
    matched = []
    for i in range(first, last + 1):
        t = tokens[i]
        out.append(text[pos : t.start()])
        if i in matched_at:
            out.append(f"{start}{t.group()}{end}")
            matched.append(t.group())
        else:
            out.append(t.group())
        pos = t.end()
    return "".join(out), matched


class Handler(BaseHTTPRequestHandler):
    store: Store
    api_key: str
    budget: BodyBudget
    protocol_version = "HTTP/1.1"
    # Body bytes of the current request not read yet, and those held in the budget.
    _unread = 0
    _held = 0

    def log_message(self, fmt: str, *args: Any) -> None:  # quiet: one line per error only
        pass

    def _send(self, status: int, body: Any, jsonl: bool = False) -> None:
        data = body.encode() if jsonl else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain" if jsonl else "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        if self._unread > DRAIN_MAX:
            self.close_connection = True
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> bytes:
        length, self._unread = self._unread, 0
        if not length:
            return b""
        self.budget.acquire(length)
        self._held += length
        return self.rfile.read(length)

    def _check_length(self) -> None:
        """The declared body size, refused over the cap before a byte of it is read."""
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            self.close_connection = True
            raise ApiError(411, "A Content-Length is required (chunked bodies are not supported).")
        text = (self.headers.get("Content-Length") or "0").strip()
        if not text.isdigit():
            self.close_connection = True
            raise ApiError(400, "Bad Content-Length.")
        self._unread = int(text)
        cap = self.store.caps.body_bytes
        if self._unread > cap:
            raise ApiError(
                413,
                f"The request body of {self._unread} bytes is over the stand-in's cap of {mib(cap)} "
                f"({cap_name('--max-body-mb')}).",
            )

    def _finish_request(self) -> None:
        """Gives back the budget; a body left unread is read and dropped (so the client gets its answer), or the
        connection closes when it is over DRAIN_MAX."""
        if self._held:
            self.budget.release(self._held)
            self._held = 0
        unread, self._unread = self._unread, 0
        if unread > DRAIN_MAX:
            self.close_connection = True
            return
        while unread > 0:
            chunk = self.rfile.read(min(unread, 1 << 16))
            if not chunk:
                self.close_connection = True
                return
            unread -= len(chunk)

    def _json(self) -> Any:
        raw = self._body()
        try:
            return json.loads(raw or b"{}")
        except json.JSONDecodeError:
            raise ApiError(400, "Bad JSON.") from None

    def _handle(self, method: str) -> None:
        self._unread = self._held = 0
        try:
            self._route(method)
        finally:
            self._finish_request()

    def _route(self, method: str) -> None:
        try:
            url = urlparse(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            parts = [unquote(p) for p in url.path.strip("/").split("/") if p]
            self._check_length()
            if parts == ["health"]:
                return self._send(200, {"ok": True})
            key = self.headers.get("X-TYPESENSE-API-KEY") or query.pop("x-typesense-api-key", None)
            if key != self.api_key:
                raise ApiError(401, "Forbidden - a valid `x-typesense-api-key` header must be sent.")
            s = self.store
            if method == "POST" and parts == ["collections"]:
                return self._send(201, s.create(self._json()))
            if method == "POST" and parts == ["multi_search"]:
                body = self._json()
                searches = body.get("searches", [])
                if len(searches) > MAX_MULTI_SEARCHES:
                    raise ApiError(
                        422, f"Number of multi searches exceeds `limit_multi_searches` ({MAX_MULTI_SEARCHES})."
                    )
                results: list[dict[str, Any]] = []
                answer_bytes = 0
                for search in searches:
                    try:
                        if answer_bytes > s.caps.body_bytes:
                            raise ApiError(
                                413,
                                f"The answer is over the stand-in's cap of {mib(s.caps.body_bytes)} "
                                f"({cap_name('--max-body-mb')}); ask for fewer hits.",
                            )
                        results.append(s.search({**query, **search}))
                        answer_bytes += len(json.dumps(results[-1]))
                    except ApiError as e:
                        results.append({"code": e.status, "error": str(e)})
                return self._send(200, {"results": results})
            if len(parts) >= 2 and parts[0] == "collections":
                name = parts[1]
                rest = parts[2:]
                if not rest and method == "GET":
                    return self._send(200, s.retrieve(name))
                if not rest and method == "DELETE":
                    return self._send(200, s.delete(name))
                if rest == ["documents"] and method == "POST":
                    return self._send(201, s.add(name, self._json(), query.get("action", "create")))
                if rest == ["documents", "import"] and method == "POST":
                    docs = [line for line in self._body().decode().splitlines() if line.strip()]
                    if len(docs) > s.caps.import_documents:
                        raise ApiError(
                            413,
                            f"The import holds {len(docs)} documents, over the stand-in's cap of "
                            f"{s.caps.import_documents} per import ({cap_name('--max-import-documents')}).",
                        )
                    lines = []
                    for line in docs:
                        try:
                            s.add(name, json.loads(line), query.get("action", "create"))
                            lines.append(json.dumps({"success": True}))
                        except ApiError as e:
                            lines.append(
                                json.dumps({"success": False, "code": e.status, "error": str(e), "document": line})
                            )
                        except json.JSONDecodeError as e:
                            lines.append(json.dumps({"success": False, "error": str(e), "document": line}))
                    return self._send(200, "\n".join(lines), jsonl=True)
                if rest == ["documents", "search"] and method == "GET":
                    return self._send(200, s.search({**query, "collection": name}))
            raise ApiError(404, "Not Found")
        except ApiError as e:
            self._send(e.status, {"message": str(e)})
        except Exception as e:  # noqa: BLE001 - a bug answers 500 and is logged, never kills the server
            print(f"typesense stand-in: {method} {self.path}: {e!r}", file=sys.stderr, flush=True)
            self._send(500, {"message": f"internal error: {e}"})

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_DELETE(self) -> None:
        self._handle("DELETE")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8108)
    parser.add_argument("--api-key", default="Fake")
    defaults = Caps()
    for flag, default in (
        ("--max-body-mb", defaults.body_bytes // MiB),
        ("--max-import-documents", defaults.import_documents),
        ("--max-collection-documents", defaults.collection_documents),
        ("--max-collection-mb", defaults.collection_bytes // MiB),
        ("--max-collections", defaults.collections),
        ("--max-total-mb", defaults.total_bytes // MiB),
    ):
        parser.add_argument(flag, type=int, default=default, help=f"cap (default {default}; {cap_name(flag)})")
    args = parser.parse_args()
    caps = Caps(
        body_bytes=args.max_body_mb * MiB,
        import_documents=args.max_import_documents,
        collection_documents=args.max_collection_documents,
        collection_bytes=args.max_collection_mb * MiB,
        collections=args.max_collections,
        total_bytes=args.max_total_mb * MiB,
    )
    if min(vars(args)[k] for k in vars(args) if k.startswith("max_")) < 1:
        parser.error("every cap must be at least 1")
    Handler.store = Store(caps)
    Handler.budget = BodyBudget(4 * caps.body_bytes)
    Handler.api_key = args.api_key
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    print(
        f"typesense stand-in (SQLite FTS5 {sqlite3.sqlite_version}, lexical only) on {args.host}:{args.port}; "
        f"caps: {caps}",
        flush=True,
    )
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
