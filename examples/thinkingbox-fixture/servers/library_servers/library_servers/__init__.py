"""MCP tool servers of the thinkingbox-fixture example dataset (original code)."""
