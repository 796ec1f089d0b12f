"""Catalog server of the library fixture: the books, where they are shelved and their status.

State: {"books": [{"id", "title", "author", "year", "shelf", "status", "tags"}]}
Tools: search_books (read-only), move_book (mutating). Run: python -m library_servers.catalog_server
"""

from __future__ import annotations

from typing import Any

from library_servers.statekit import (
    StateServer,
    Tool,
    ToolError,
    find,
    obj_schema,
    serve,
)

SHELF = r"^[A-Z][0-9]{1,2}$"


def search_books(state: dict[str, Any], args: dict[str, Any]) -> Any:
    words = args["query"].lower().split()
    author = args.get("author", "").lower()
    hits = []
    for book in sorted(state["books"], key=lambda b: b["id"]):
        if book["status"] == "withdrawn" and not args.get("include_withdrawn", False):
            continue
        haystack = (
            f"{book['title']} {book['author']} {' '.join(book.get('tags', []))}".lower()
        )
        if all(w in haystack for w in words) and author in book["author"].lower():
            hits.append(book)
    return {"count": len(hits), "books": hits}


def move_book(state: dict[str, Any], args: dict[str, Any]) -> Any:
    book = find(state["books"], args["book_id"], "book")
    if book["status"] == "withdrawn":
        raise ToolError(f"{book['id']} is withdrawn and has no shelf")
    if book["shelf"] == args["shelf"]:
        raise ToolError(f"{book['id']} is already on shelf {args['shelf']}")
    previous, book["shelf"] = book["shelf"], args["shelf"]
    return {"book_id": book["id"], "from_shelf": previous, "to_shelf": book["shelf"]}


TOOLS = [
    Tool(
        "search_books",
        "Search the catalogue by words in the title, author or subject tags. Returns matching books with their "
        "id, shelf and status. Withdrawn books are left out unless include_withdrawn is true.",
        obj_schema(
            {
                "query": {
                    "type": "string",
                    "minLength": 1,
                    "description": "Words that must all appear",
                },
                "author": {
                    "type": "string",
                    "description": "Optional part of the author's name",
                },
                "include_withdrawn": {
                    "type": "boolean",
                    "description": "Also list withdrawn books (default false)",
                },
            },
            ["query"],
        ),
        search_books,
        read_only=True,
    ),
    Tool(
        "move_book",
        "Move a book to another shelf (shelf codes look like A3 or C12).",
        obj_schema(
            {
                "book_id": {
                    "type": "string",
                    "pattern": r"^B[0-9]{3}$",
                    "description": "Book id, e.g. B004",
                },
                "shelf": {
                    "type": "string",
                    "pattern": SHELF,
                    "description": "Target shelf code",
                },
            },
            ["book_id", "shelf"],
        ),
        move_book,
    ),
]

SERVER = StateServer("catalog", TOOLS, state_keys=["books"])

if __name__ == "__main__":
    serve(SERVER)
