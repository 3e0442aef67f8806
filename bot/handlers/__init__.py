"""Router factories; each takes its dependencies as arguments (no globals)."""
