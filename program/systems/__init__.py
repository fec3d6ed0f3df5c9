"""Every system beside SHARP: plain RAG (vanilla.py) and its retrieval variants, and the arena's published designs;
one small module each, all with SharpRAG's prediction shape."""
