"""Helpers shared by the fixture's test files (a sibling module: test files import it by name)."""


def calls_to(x, tool):
    """The tool calls the agent made to `tool`, in order."""
    return [c for c in x.tool_calls if c["tool_call"]["name"] == tool]


def state_matches(x, server):
    """True when the server's final state equals the golden one; the diff explains a mismatch."""
    effects = x.effects[server]
    return effects["result_db_hash"] == effects["golden_db_hash"]
