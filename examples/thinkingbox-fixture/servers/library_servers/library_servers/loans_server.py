"""Loans server of the library fixture: members, copies held and loans.

State: {"members": [{"id", "name", "max_loans", "blocked"}],
        "holdings": [{"id": BOOK_ID, "copies": N}],
        "loans": [{"id", "book_id", "member_id", "due_date", "status": "active"|"returned", "renewals", "note"}]}
"note" is free text and is volatile: it is excluded from hashes and diffs.
Tools: get_member and opening_hours (read-only), checkout_book, return_book, renew_loan.
Run: python -m library_servers.loans_server
"""

from __future__ import annotations

from datetime import date
from typing import Any

from library_servers.statekit import (
    StateServer,
    Tool,
    ToolError,
    find,
    obj_schema,
    serve,
)

MAX_RENEWALS = 2
MEMBER_ID = {
    "type": "string",
    "pattern": r"^M[0-9]{2}$",
    "description": "Member id, e.g. M02",
}
BOOK_ID = {
    "type": "string",
    "pattern": r"^B[0-9]{3}$",
    "description": "Book id, e.g. B004",
}
LOAN_ID = {
    "type": "string",
    "pattern": r"^L[0-9]{4}$",
    "description": "Loan id, e.g. L0007",
}
DATE = {"type": "string", "format": "date", "description": "YYYY-MM-DD"}


def _active(state: dict[str, Any], **match: str) -> list[dict[str, Any]]:
    return [
        l
        for l in state["loans"]
        if l["status"] == "active" and all(l[k] == v for k, v in match.items())
    ]


def get_member(state: dict[str, Any], args: dict[str, Any]) -> Any:
    member = find(state["members"], args["member_id"], "member")
    loans = sorted(_active(state, member_id=member["id"]), key=lambda l: l["id"])
    return {
        **member,
        "active_loans": loans,
        "loans_left": max(0, member["max_loans"] - len(loans)),
    }


def checkout_book(state: dict[str, Any], args: dict[str, Any]) -> Any:
    member = find(state["members"], args["member_id"], "member")
    holding = find(state["holdings"], args["book_id"], "holding for book")
    if member["blocked"]:
        raise ToolError(f"member {member['id']} is blocked and cannot borrow")
    if len(_active(state, member_id=member["id"])) >= member["max_loans"]:
        raise ToolError(
            f"member {member['id']} has reached the limit of {member['max_loans']} loans"
        )
    if len(_active(state, book_id=holding["id"])) >= holding["copies"]:
        raise ToolError(f"no copy of {holding['id']} is available")
    if _active(state, member_id=member["id"], book_id=holding["id"]):
        raise ToolError(f"member {member['id']} already has {holding['id']} on loan")
    numbers = [int(l["id"][1:]) for l in state["loans"]]
    loan = {
        "id": f"L{max(numbers, default=0) + 1:04d}",
        "book_id": holding["id"],
        "member_id": member["id"],
        "due_date": args["due_date"],
        "status": "active",
        "renewals": 0,
        "note": args.get("note", ""),
    }
    state["loans"].append(loan)
    return {"loan": loan}


def return_book(state: dict[str, Any], args: dict[str, Any]) -> Any:
    loan = find(state["loans"], args["loan_id"], "loan")
    if loan["status"] != "active":
        raise ToolError(f"loan {loan['id']} was already returned")
    loan["status"] = "returned"
    return {"loan": loan}


def renew_loan(state: dict[str, Any], args: dict[str, Any]) -> Any:
    loan = find(state["loans"], args["loan_id"], "loan")
    if loan["status"] != "active":
        raise ToolError(f"loan {loan['id']} is not active")
    if loan["renewals"] >= MAX_RENEWALS:
        raise ToolError(
            f"loan {loan['id']} has already been renewed {MAX_RENEWALS} times"
        )
    if date.fromisoformat(args["new_due_date"]) <= date.fromisoformat(loan["due_date"]):
        raise ToolError(f"the new due date must be after {loan['due_date']}")
    loan["due_date"] = args["new_due_date"]
    loan["renewals"] += 1
    return {"loan": loan}


def opening_hours(state: dict[str, Any], args: dict[str, Any]) -> Any:
    # A direct_response tool in the circulation_desk scenario: its template is filled from these fields.
    return {"open": "9:00", "close": "18:00", "days": "Monday to Saturday"}


TOOLS = [
    Tool(
        "opening_hours",
        "The library's opening hours.",
        obj_schema({}, []),
        opening_hours,
        read_only=True,
    ),
    Tool(
        "get_member",
        "Look up a library member: name, loan limit, whether blocked, and their active loans.",
        obj_schema({"member_id": MEMBER_ID}, ["member_id"]),
        get_member,
        read_only=True,
    ),
    Tool(
        "checkout_book",
        "Lend a book to a member until the given due date. Creates a loan and returns it.",
        obj_schema(
            {
                "member_id": MEMBER_ID,
                "book_id": BOOK_ID,
                "due_date": DATE,
                "note": {
                    "type": "string",
                    "description": "Optional free-text note for staff",
                },
            },
            ["member_id", "book_id", "due_date"],
        ),
        checkout_book,
    ),
    Tool(
        "return_book",
        "Record that the book of an active loan has been returned.",
        obj_schema({"loan_id": LOAN_ID}, ["loan_id"]),
        return_book,
    ),
    Tool(
        "renew_loan",
        "Extend an active loan to a later due date (at most two renewals per loan).",
        obj_schema(
            {"loan_id": LOAN_ID, "new_due_date": DATE}, ["loan_id", "new_due_date"]
        ),
        renew_loan,
    ),
]

SERVER = StateServer(
    "loans",
    TOOLS,
    state_keys=["members", "holdings", "loans"],
    volatile=frozenset({"note"}),
)

if __name__ == "__main__":
    serve(SERVER)
