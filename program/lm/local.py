"""Local models in-process: llama.cpp behind DSPy's engine interface, with prompt-prefix reuse.

One :class:`LocalSession` per (model file, n_ctx, n_threads) per process: every role and every
thread that uses the model shares it, one call at a time (a lock around the Llama object).

Prefix reuse. DSPy prompts put instructions and demos first and the inputs last, so calls of one
predictor share a long prefix. llama.cpp keeps the KV cache of the *last* prompt and skips its
common prefix; SHARP interleaves planner, critic and generator, which would throw that away on
every switch. So the session also keeps a small RAM cache of llama.cpp states (KV only, no
logits copy), looked up by longest token prefix: a critic call restores the last critic state
and evaluates only its new suffix. Each response reports the reused tokens as
``usage.cache_read_tokens`` (DSPy: ``prompt_tokens_details.cached_tokens``).
"""

from __future__ import annotations

import atexit
import json
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dspy.lm15 import (
    ContextLengthError,
    Message,
    Response,
    TextPart,
    TokenLogprob,
    TopLogprob,
    Usage,
    response_to_events,
)

from program.errors import ModelFileError
from program.lm.local_files import get_local_model, model_path
from program.lm.specs import LMSpec

log = logging.getLogger(__name__)

DEFAULT_PREFIX_CACHE_BYTES = 1 << 30
# Two cached states sharing at least this many tokens come from one predictor: keep the newer.
_SAME_PREDICTOR_TOKENS = 128


def _import_llama():
    try:
        import llama_cpp
    except ImportError:
        raise ModelFileError(
            "local models need llama-cpp-python: pip install 'llama-cpp-python[server]==0.3.36' "
            "(or pip install 'sharp-rag[local]')"
        ) from None
    return llama_cpp


@dataclass
class ChatResult:
    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    reused_tokens: int
    seconds: float
    # per generated token: (text, logprob, [(alternative text, logprob), ...]) when asked for
    logprobs: list[tuple[str, float, list[tuple[str, float]]]] | None = None


def _lcp(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _make_classes(llama_cpp):
    from llama_cpp.llama_cache import LlamaRAMCache

    class PrefixStateCache(LlamaRAMCache):
        """LRU of llama.cpp states by token prefix; a new state replaces older ones of its predictor."""

        def __setitem__(self, key, value):
            key = tuple(key)
            for old in [k for k in self.cache_state if _lcp(k, key) >= _SAME_PREDICTOR_TOKENS]:
                del self.cache_state[old]
            super().__setitem__(key, value)

    class CountingLlama(llama_cpp.Llama):
        """Counts tokens per eval() call; saves/loads states without llama-cpp-python's logits copy."""

        evals: list[int] | None = None

        def eval(self, tokens):
            if self.evals is not None:
                self.evals.append(len(tokens))
            return super().eval(tokens)

        def save_state(self):
            ctx = self._ctx.ctx
            size = llama_cpp.llama_state_get_size(ctx)
            buf = (llama_cpp.ctypes.c_uint8 * int(size))()
            n = int(llama_cpp.llama_state_get_data(ctx, buf, size))
            import numpy as np

            return llama_cpp.LlamaState(
                input_ids=self.input_ids[: self.n_tokens].copy(),
                scores=np.empty((0, 0), dtype=np.single),
                n_tokens=self.n_tokens,
                llama_state=bytes(buf)[:n],
                llama_state_size=n,
                seed=self._seed,
            )

        def load_state(self, state):
            self.input_ids[: state.n_tokens] = state.input_ids[: state.n_tokens]
            self.n_tokens = state.n_tokens
            self._requires_eval = True
            self._seed = state.seed
            buf = (llama_cpp.ctypes.c_uint8 * state.llama_state_size).from_buffer_copy(state.llama_state)
            if llama_cpp.llama_state_set_data(self._ctx.ctx, buf, state.llama_state_size) != state.llama_state_size:
                raise RuntimeError("failed to restore a llama.cpp state")

    return CountingLlama, PrefixStateCache


class TopLogprobs:
    """A llama.cpp logits processor that records the top-k log-probabilities of every decoding step.

    llama-cpp-python returns logprobs only for models loaded with ``logits_all=True`` (logits for
    every prompt token: ~600 KB each for a 152k vocabulary, and a slower prompt pass). The sampler
    sees the next-token logits anyway, so this reads them there, before the grammar and the greedy
    pick, at the cost of one log-softmax per generated token (small against generating the token:
    experiments/findings/evidence-critic.md, 'Evidence-critic discrimination'). The chosen token of step i
    is read at step i+1 (it is then the last input id).
    """

    def __init__(self, k: int):
        self.k = max(1, int(k))
        self.steps: list[dict] = []
        self._last = None

    def __call__(self, input_ids, scores):
        import numpy as np

        if self._last is not None:
            self._close(int(input_ids[-1]))
        # a float32 copy (later samplers, the grammar among them, rewrite the buffer in place); float64
        # conversions cost several times more a token (this one's cost: experiments/findings/evidence-critic.md,
        # 'Evidence-critic discrimination')
        logits = np.array(scores, dtype=np.float32)
        top_logit = float(logits.max())
        lse = top_logit + float(np.log(np.exp(logits - top_logit).sum(dtype=np.float64)))
        k = min(self.k, logits.size)
        top = np.argpartition(logits, logits.size - k)[-k:]
        top = top[np.argsort(-logits[top])]
        self.steps.append({"top": [(int(t), float(logits[t]) - lse) for t in top]})
        self._last = (logits, lse)
        return scores

    def _close(self, token: int) -> None:
        logits, lse = self._last
        self.steps[-1]["token"] = (token, float(logits[token]) - lse)
        self._last = None

    def finish(self, n_tokens: int, text_of) -> list[tuple[str, float, list[tuple[str, float]]]]:
        """The first ``n_tokens`` steps (the completion's tokens; a last step that produced the end
        token is dropped) as (token text, logprob, top alternatives), decoded with ``text_of``. A last
        token that was never evaluated (cut by max_tokens) is taken to be its step's best alternative."""
        out = []
        for step in self.steps[:n_tokens]:
            token, lp = step.get("token") or step["top"][0]
            out.append((text_of(token), lp, [(text_of(t), a) for t, a in step["top"]]))
        return out


def _reuse_mode(value: bool | str) -> str:
    if isinstance(value, bool):
        return "states" if value else "off"
    if value not in ("states", "live", "off"):
        raise ValueError(f"prefix_reuse must be True, False, 'states', 'live' or 'off', not {value!r}")
    return value


class LocalSession:
    """One loaded GGUF model; thread-safe; see the module docstring."""

    def __init__(self, path: Path, *, n_ctx: int, n_threads: int, prefix_cache_bytes: int):
        llama_cpp = _import_llama()
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        CountingLlama, PrefixStateCache = _make_classes(llama_cpp)
        t0 = time.perf_counter()
        self.llm = CountingLlama(
            model_path=str(path),
            n_ctx=n_ctx,
            n_threads=n_threads,
            n_threads_batch=n_threads,
            n_batch=512,
            seed=0,
            verbose=False,
        )
        self.load_seconds = time.perf_counter() - t0
        self.n_ctx = self.llm.n_ctx()
        self.lock = threading.Lock()
        self.states = PrefixStateCache(prefix_cache_bytes) if prefix_cache_bytes > 0 else None
        template = self.llm.metadata.get("tokenizer.chat_template")
        if not template:
            raise ModelFileError(f"{path} has no chat template; it cannot serve chat calls")
        text = self.llm._model.token_get_text
        eos, bos = self.llm.token_eos(), self.llm.token_bos()
        self.formatter = Jinja2ChatFormatter(
            template=template,
            eos_token=text(eos) if eos != -1 else "",
            bos_token=text(bos) if bos != -1 else "",
            stop_token_ids=[eos],
        )
        self._grammars: dict[str, Any] = {}
        log.info("loaded %s (n_ctx=%d, n_threads=%d) in %.1fs", path.name, self.n_ctx, n_threads, self.load_seconds)

    def _grammar(self, response_format: dict | None):
        """A llama.cpp grammar for OpenAI/lm15 ``response_format`` (json_object, json_schema), or None."""
        if not response_format or response_format.get("type") not in ("json_object", "json_schema"):
            return None
        schema = response_format.get("schema")
        if schema is None and isinstance(response_format.get("json_schema"), dict):
            schema = response_format["json_schema"].get("schema")
        key = json.dumps(schema, sort_keys=True) if schema is not None else ""
        if key not in self._grammars:
            from llama_cpp.llama_grammar import JSON_GBNF, LlamaGrammar

            try:
                # the schema in its own property order: llama.cpp emits properties in that order, and a
                # sorted copy put the critic's verdict after its (looping) lists, where max_tokens cut it
                grammar = LlamaGrammar.from_json_schema(json.dumps(schema), verbose=False) if key else None
            except Exception as exc:
                log.warning("cannot turn the JSON schema into a grammar (%s); using plain JSON", exc)
                grammar = None
            self._grammars[key] = grammar or LlamaGrammar.from_string(JSON_GBNF, verbose=False)
        return self._grammars[key]

    def chat(
        self,
        messages: list[dict],
        *,
        max_tokens: int,
        temperature: float = 0.0,
        top_p: float | None = None,
        stop: list[str] | None = None,
        response_format: dict | None = None,
        seed: int | None = None,
        prefix_reuse: bool | str = True,
        logprobs: int | None = None,
    ) -> ChatResult:
        """One chat completion. Raises lm15's ContextLengthError when prompt + max_tokens exceed n_ctx.

        ``logprobs``: also return the top-``logprobs`` alternatives of every generated token
        (:class:`TopLogprobs`); None returns none.

        ``prefix_reuse``: True/"states" (live KV prefix + cached states), "live" (llama.cpp's match
        on the previous prompt only), False/"off" (evaluate every prompt from scratch).
        """
        with self.lock:
            t0 = time.perf_counter()
            llm = self.llm
            fmt, tokens = self._prompt(messages, max_tokens)
            stops = list(stop or []) + ([fmt.stop] if isinstance(fmt.stop, str) else list(fmt.stop or []))
            self._set_reuse(_reuse_mode(prefix_reuse))
            llm.evals = []
            recorder = TopLogprobs(logprobs) if logprobs is not None else None
            try:
                out = llm.create_completion(
                    prompt=tokens,
                    max_tokens=max_tokens,
                    temperature=temperature,
                    top_p=0.95 if top_p is None else top_p,
                    top_k=40,
                    min_p=0.05,
                    repeat_penalty=1.0,
                    stop=stops,
                    seed=seed,
                    grammar=self._grammar(response_format),
                    stopping_criteria=fmt.stopping_criteria,
                    logits_processor=llama_cpp_processors(recorder) if recorder else None,
                )
                evaluated = llm.evals[0] if llm.evals else len(tokens)
            finally:
                llm.evals = None
            return self._result(out, len(tokens), evaluated, t0, recorder)

    def _prompt(self, messages: list[dict], max_tokens: int) -> tuple[Any, list[int]]:
        """The chat format's rendering of ``messages`` and its tokens; ContextLengthError when they and
        ``max_tokens`` do not fit in n_ctx."""
        fmt = self.formatter(messages=messages)
        tokens = self.llm.tokenize(fmt.prompt.encode("utf-8"), add_bos=not fmt.added_special, special=True)
        if len(tokens) + max_tokens > self.n_ctx:
            raise ContextLengthError(
                f"the prompt has {len(tokens)} tokens and max_tokens is {max_tokens}: "
                f"{len(tokens) + max_tokens} > n_ctx {self.n_ctx}"
            )
        return fmt, tokens

    def _set_reuse(self, mode: str) -> None:
        """Set up prefix reuse for the next completion: "off" forgets the live prefix; only "states" reads
        and writes the cached states."""
        if mode == "off":
            self.llm.reset()
        self.llm.set_cache(self.states if mode == "states" else None)

    def _result(self, out: dict, n_prompt: int, evaluated: int, t0: float, recorder: TopLogprobs | None) -> ChatResult:
        """The ChatResult of llama.cpp's completion ``out`` (``evaluated`` of the ``n_prompt`` prompt tokens
        were computed, the rest reused), timed from ``t0``."""
        choice = out["choices"][0]
        usage = out["usage"]
        token_logprobs = None
        if recorder is not None:
            token_logprobs = recorder.finish(usage["completion_tokens"], self._token_text)
        return ChatResult(
            text=choice["text"],
            finish_reason=choice.get("finish_reason") or "stop",
            prompt_tokens=usage["prompt_tokens"],
            completion_tokens=usage["completion_tokens"],
            reused_tokens=max(0, n_prompt - evaluated),
            seconds=time.perf_counter() - t0,
            logprobs=token_logprobs,
        )

    def _token_text(self, token: int) -> str:
        return self.llm.detokenize([token], special=False).decode("utf-8", errors="replace")

    def clear_states(self) -> None:
        """Forget every cached prefix (the live KV cache included)."""
        with self.lock:
            if self.states is not None:
                self.states.cache_state.clear()
            self.llm.reset()


def llama_cpp_processors(*processors):
    from llama_cpp import LogitsProcessorList

    return LogitsProcessorList(list(processors))


_SESSIONS: dict[tuple, LocalSession] = {}
_SESSIONS_LOCK = threading.Lock()


def get_session(
    model: str, *, n_ctx: int = 8192, n_threads: int = 2, prefix_cache_bytes: int = DEFAULT_PREFIX_CACHE_BYTES
) -> LocalSession:
    """The process-wide session for a local model (loaded on first use)."""
    path = model_path(model)
    key = (str(path), n_ctx, n_threads)
    with _SESSIONS_LOCK:
        if key not in _SESSIONS:
            _SESSIONS[key] = LocalSession(path, n_ctx=n_ctx, n_threads=n_threads, prefix_cache_bytes=prefix_cache_bytes)
        return _SESSIONS[key]


def new_session(
    model: str, *, n_ctx: int = 8192, n_threads: int = 2, prefix_cache_bytes: int = DEFAULT_PREFIX_CACHE_BYTES
) -> LocalSession:
    """Another loaded copy of a local model, not shared (a server's extra slot); freed with the others."""
    path = model_path(model)
    session = LocalSession(path, n_ctx=n_ctx, n_threads=n_threads, prefix_cache_bytes=prefix_cache_bytes)
    with _SESSIONS_LOCK:
        _SESSIONS[(str(path), n_ctx, n_threads, id(session))] = session  # unload_all frees it too
    return session


def unload_all() -> None:
    """Free every loaded model (tests, benchmarks that compare cold runs, and at exit).

    Closing explicitly before interpreter teardown avoids llama-cpp-python's noisy
    ``free_model`` TypeError when its module globals are already gone.
    """
    with _SESSIONS_LOCK:
        sessions = list(_SESSIONS.values())
        _SESSIONS.clear()
    for session in sessions:
        close = getattr(session.llm, "close", None)
        if close is not None:
            close()


atexit.register(unload_all)


def request_messages(request) -> list[dict]:
    """An lm15 Request as chat messages: the system text first, then each message's text."""
    out = []
    if request.system is not None:
        system = request.system if isinstance(request.system, str) else "".join(p.text for p in request.system)
        out.append({"role": "system", "content": system})
    out.extend({"role": m.role, "content": m.text or ""} for m in request.messages)
    return out


class LocalEngine:
    """DSPy 3.4 engine (``complete(Request) -> Response``) for a local model; pass as ``dspy.LM(engine=...)``."""

    supports_response_schema = True
    supports_function_calling = False
    supports_reasoning = False
    supported_params = frozenset(
        {"temperature", "max_tokens", "top_p", "stop", "seed", "response_format", "logprobs", "top_logprobs"}
    )

    def __init__(self, model: str, *, n_ctx: int = 8192, n_threads: int = 2, prefix_reuse: bool | str = True):
        _reuse_mode(prefix_reuse)
        self.model = f"local/{get_local_model(model).name}"
        self.n_ctx, self.n_threads, self.prefix_reuse = n_ctx, n_threads, prefix_reuse
        model_path(self.model)  # fail now (missing package, bad hash), load on the first call

    @classmethod
    def for_spec(cls, spec: LMSpec, **kwargs: Any) -> LocalEngine:
        return cls(spec.model, n_ctx=spec.n_ctx, n_threads=spec.n_threads, **kwargs)

    @property
    def session(self) -> LocalSession:
        return get_session(self.model, n_ctx=self.n_ctx, n_threads=self.n_threads)

    def complete(self, request) -> Response:
        cfg = request.config
        result = self.session.chat(
            request_messages(request),
            max_tokens=cfg.max_tokens or 1024,
            temperature=0.0 if cfg.temperature is None else cfg.temperature,
            top_p=cfg.top_p,
            stop=list(cfg.stop or ()),
            response_format=cfg.response_format,
            seed=cfg.seed,
            prefix_reuse=self.prefix_reuse,
            logprobs=cfg.logprobs,
        )
        return Response(
            id=None,
            model=self.model,
            message=Message.assistant([TextPart(result.text)]),
            finish_reason="length" if result.finish_reason == "length" else "stop",
            usage=Usage(
                input_tokens=result.prompt_tokens,
                output_tokens=result.completion_tokens,
                cache_read_tokens=result.reused_tokens,
            ),
            logprobs=_lm15_logprobs(result.logprobs),
        )

    def stream(self, request):
        return response_to_events(self.complete(request))

    def close(self) -> None:  # the session is shared process-wide; nothing to release per engine
        pass

    # An engine is configuration; the loaded model stays in the process registry.
    def __getstate__(self) -> dict:
        return self.dump_state()

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    def __deepcopy__(self, memo: dict) -> LocalEngine:
        return self

    def dump_state(self) -> dict:
        return {
            "model": self.model,
            "n_ctx": self.n_ctx,
            "n_threads": self.n_threads,
            "prefix_reuse": self.prefix_reuse,
        }

    @classmethod
    def load_state(cls, state: dict) -> LocalEngine:
        return cls(
            state["model"],
            n_ctx=state["n_ctx"],
            n_threads=state["n_threads"],
            prefix_reuse=state.get("prefix_reuse", True),
        )


def _lm15_logprobs(steps) -> tuple | None:
    if steps is None:
        return None
    return tuple(
        TokenLogprob(token=text, logprob=lp, top=tuple(TopLogprob(token=t, logprob=a) for t, a in alts))
        for text, lp, alts in steps
    )


class AsyncLocalEngine:
    """The async counterpart DSPy wants for ``acall``: the sync engine in a worker thread."""

    def __init__(self, sync: LocalEngine):
        self.sync = sync

    async def complete(self, request) -> Response:
        import asyncio

        return await asyncio.to_thread(self.sync.complete, request)

    async def stream(self, request):
        for event in response_to_events(await self.complete(request)):
            yield event

    async def aclose(self) -> None:
        pass

    def __deepcopy__(self, memo: dict) -> AsyncLocalEngine:
        return self
