"""The jobs the `sharp` commands run: arena, compile, tune, evaluation, demo, ship, and the
fitted retrieval parts (evidence rankers, sentence selectors)."""
