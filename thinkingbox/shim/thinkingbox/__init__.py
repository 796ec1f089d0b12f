"""Our own stand-in for the names ThinkingBox test files import from the reference framework (see common/)."""
