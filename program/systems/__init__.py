"""The arena's comparison systems: one small module each, all with SharpRAG's prediction shape."""
