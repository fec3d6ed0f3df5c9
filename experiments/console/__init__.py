"""The terminal: consoles, rendering, progress and where log records go."""
