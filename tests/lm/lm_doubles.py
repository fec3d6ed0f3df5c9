"""A scripted DSPy engine for the LM tests (no model, no network)."""

from __future__ import annotations

from dspy.lm15 import Message, Response, TextPart, Usage


class ScriptedEngine:
    """A DSPy engine that answers from a function of the last user message, with fixed usage."""

    supports_response_schema = True
    supported_params = frozenset({"temperature", "max_tokens", "response_format"})

    def __init__(self, answer, prompt_tokens: int = 50, completion_tokens: int = 5, reused: int | None = None):
        self.answer = answer
        self.prompt_tokens, self.completion_tokens, self.reused = prompt_tokens, completion_tokens, reused
        self.requests = []

    def complete(self, request):
        self.requests.append(request)
        text = self.answer(request.messages[-1].text or "")
        return Response(
            id=None,
            model="scripted",
            message=Message.assistant([TextPart(text)]),
            finish_reason="stop",
            usage=Usage(
                input_tokens=self.prompt_tokens, output_tokens=self.completion_tokens, cache_read_tokens=self.reused
            ),
        )

    def close(self):
        pass
