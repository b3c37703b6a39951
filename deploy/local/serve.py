"""The local backend's model server: an OpenAI-compatible HTTP API over a transformers model
(plus an optional peft adapter), on CPU or this machine's GPUs, for apps on `make run`.

    python -P -m deploy.local.serve --model DIR [--adapter DIR] --name NAME --port N

It answers `GET /v1/models`, `POST /v1/chat/completions` and `POST /v1/completions` (both with
`"stream": true` as server-sent events, ending with `data: [DONE]`), and `GET /health` once the
weights are loaded. It listens on 127.0.0.1 only and checks no key: the panel's proxy in front of
it does (controlpanel/usercontent, on the app's own host). It never logs a request's headers
(uvicorn's access log is off), so a key that reaches it is never written down.

Why not `transformers serve`: it loads models by hub id into a cache, and applies no local peft
adapter; vLLM (the cluster's serving image) needs a GPU. This is starlette on uvicorn, one
generation at a time (a CPU has nothing to batch with), each in a worker thread.
Import nothing of Django here.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import iterate_in_threadpool, run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

DEFAULT_MAX_TOKENS = 64
MAX_TOKENS_LIMIT = 4096


class BadRequest(Exception):
    """A request the API refuses with 400 (the message is OpenAI's `error.message`)."""


@dataclass(frozen=True)
class Sampling:
    """What one request asks of the generation."""

    max_tokens: int
    temperature: float
    top_p: float
    stop: tuple[str, ...]
    seed: int | None


class Engine:
    """The model and tokenizer, and one generation at a time (the lock)."""

    def __init__(self, model_dir: str, adapter_dir: str | None, name: str) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.torch = torch
        self.name = name
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        device = "cuda" if torch.cuda.is_available() else "cpu"
        model: Any = AutoModelForCausalLM.from_pretrained(model_dir)
        if adapter_dir and (Path(adapter_dir) / "adapter_config.json").exists():
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, adapter_dir).merge_and_unload()
        self.model: Any = model.to(device).eval()
        self.device = device
        self.lock = threading.Lock()
        self.created = int(time.time())

    def prompt_ids(self, *, messages: list[dict[str, Any]] | None, prompt: str | None) -> Any:
        if messages is not None:
            if getattr(self.tokenizer, "chat_template", None):
                text = self.tokenizer.apply_chat_template(
                    messages, tokenize=False, add_generation_prompt=True
                )
            else:
                text = "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant:"
            ids = self.tokenizer(text, return_tensors="pt", add_special_tokens=False)
        else:
            ids = self.tokenizer(prompt or "", return_tensors="pt")
        return ids["input_ids"].to(self.device)

    def generate(self, input_ids: Any, sampling: Sampling, produced: list[int]) -> Iterator[str]:
        """The new text, piece by piece, as tokens are chosen (holds the lock throughout);
        the tokens go into `produced` (the usage counts them). A piece that ends inside a
        character (byte-level tokens) waits for the rest of it."""
        torch = self.torch
        eos = self.tokenizer.eos_token_id
        with self.lock, torch.no_grad():
            generator = torch.Generator(device=self.device)
            if sampling.seed is not None:
                generator.manual_seed(sampling.seed)
            past, ids = None, input_ids
            text_before = ""
            for _ in range(sampling.max_tokens):
                out = self.model(input_ids=ids, past_key_values=past, use_cache=True)
                past = out.past_key_values
                token = self._choose(out.logits[0, -1], sampling, generator)
                if token == eos:
                    return
                produced.append(token)
                text = str(self.tokenizer.decode(produced, skip_special_tokens=True))
                if text.endswith("\ufffd") and len(produced) < sampling.max_tokens:
                    ids = torch.tensor([[token]], device=self.device)
                    continue
                piece, text_before = text[len(text_before) :], text
                if piece:
                    yield piece
                ids = torch.tensor([[token]], device=self.device)

    def _choose(self, logits: Any, sampling: Sampling, generator: Any) -> int:
        torch = self.torch
        if sampling.temperature <= 0:
            return int(torch.argmax(logits))
        probs = torch.softmax(logits.float() / sampling.temperature, dim=-1)
        if sampling.top_p < 1:
            sorted_probs, order = torch.sort(probs, descending=True)
            keep = torch.cumsum(sorted_probs, dim=-1) - sorted_probs < sampling.top_p
            probs = torch.zeros_like(probs).scatter(0, order[keep], sorted_probs[keep])
        return int(torch.multinomial(probs / probs.sum(), 1, generator=generator))


def _sampling(body: dict[str, Any]) -> Sampling:
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or DEFAULT_MAX_TOKENS
    if not isinstance(max_tokens, int) or not 1 <= max_tokens <= MAX_TOKENS_LIMIT:
        raise BadRequest(f"max_tokens must be an integer from 1 to {MAX_TOKENS_LIMIT}")
    temperature = body.get("temperature", 1.0)
    top_p = body.get("top_p", 1.0)
    for key, value, top in (("temperature", temperature, 2.0), ("top_p", top_p, 1.0)):
        if not isinstance(value, int | float) or not 0 <= value <= top:
            raise BadRequest(f"{key} must be a number from 0 to {top}")
    if body.get("n", 1) != 1:
        raise BadRequest("n must be 1 on this server")
    stop = body.get("stop") or ()
    stop = (stop,) if isinstance(stop, str) else tuple(stop)
    if not all(isinstance(s, str) and s for s in stop) or len(stop) > 4:
        raise BadRequest("stop must be a string or a list of at most 4 strings")
    seed = body.get("seed")
    if seed is not None and not isinstance(seed, int):
        raise BadRequest("seed must be an integer")
    return Sampling(max_tokens, float(temperature), float(top_p), stop, seed)


def _until_stop(pieces: Iterator[str], stop: tuple[str, ...]) -> Iterator[tuple[str, str]]:
    """(text, finish reason '' while going) with the text cut before the first stop string;
    held back while it could still be the start of one."""
    buffer, sent, count = "", 0, 0
    for piece in pieces:
        buffer += piece
        count += 1
        cut = min((buffer.find(s) for s in stop if s in buffer), default=-1)
        if cut >= 0:
            if cut > sent:
                yield buffer[sent:cut], ""
            yield "", "stop"
            return
        hold = max((len(s) - 1 for s in stop), default=0)
        safe = max(sent, len(buffer) - hold)
        if safe > sent:
            yield buffer[sent:safe], ""
            sent = safe
    if len(buffer) > sent:
        yield buffer[sent:], ""
    yield "", "length" if count else "stop"


def _error(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "code": None}}, status)


def make_app(engine: Engine) -> Starlette:
    """The ASGI application over one loaded engine."""

    async def health(_request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def models(_request: Request) -> Response:
        model = {"id": engine.name, "object": "model", "created": engine.created}
        return JSONResponse({"object": "list", "data": [model | {"owned_by": "ajuste"}]})

    async def chat(request: Request) -> Response:
        return await _complete(engine, request, chat=True)

    async def completions(request: Request) -> Response:
        return await _complete(engine, request, chat=False)

    return Starlette(
        routes=[
            Route("/health", health),
            Route("/v1/models", models),
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/completions", completions, methods=["POST"]),
        ]
    )


async def _complete(engine: Engine, request: Request, *, chat: bool) -> Response:
    """Answer one completion request (chat or plain), whole or streamed."""
    try:
        body = await request.json()
    except ValueError:
        return _error(400, "the body is not JSON")
    try:
        if not isinstance(body, dict):
            raise BadRequest("the body must be a JSON object")
        model = body.get("model")
        if model != engine.name:
            return _error(404, f"The model {model!r} does not exist", "not_found_error")
        sampling = _sampling(body)
        input_ids = _input(engine, body, chat=chat)
    except BadRequest as exc:
        return _error(400, str(exc))
    reply = _Reply(engine, chat=chat)
    produced: list[int] = []
    pieces = _until_stop(engine.generate(input_ids, sampling, produced), sampling.stop)
    if body.get("stream"):
        usage = bool((body.get("stream_options") or {}).get("include_usage"))
        prompt = int(input_ids.shape[1])
        events = reply.events(iterate_in_threadpool(pieces), prompt, produced, usage)
        return StreamingResponse(events, media_type="text/event-stream")
    text, finish = await run_in_threadpool(_collect, pieces)
    return JSONResponse(reply.whole(text, finish, int(input_ids.shape[1]), len(produced)))


def _input(engine: Engine, body: dict[str, Any], *, chat: bool) -> Any:
    """The prompt's token ids, from `messages` (chat) or `prompt`; BadRequest if malformed."""
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("messages must be a non-empty list")
        for m in messages:
            if not isinstance(m, dict) or not isinstance(m.get("content"), str):
                raise BadRequest("each message needs a role and a string content")
        return engine.prompt_ids(messages=messages, prompt=None)
    prompt = body.get("prompt")
    if not isinstance(prompt, str):
        raise BadRequest("prompt must be a string")
    return engine.prompt_ids(messages=None, prompt=prompt)


def _collect(pieces: Iterator[tuple[str, str]]) -> tuple[str, str]:
    text, finish = "", "stop"
    for piece, reason in pieces:
        text += piece
        finish = reason or finish
    return text, finish


class _Reply:
    """One answer's OpenAI shapes (a whole object, or chunks)."""

    def __init__(self, engine: Engine, *, chat: bool) -> None:
        self.engine, self.chat = engine, chat
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self.object = "chat.completion" if chat else "text_completion"

    def _head(self, suffix: str = "") -> dict[str, Any]:
        return {
            "id": self.id,
            "object": self.object + suffix,
            "created": self.created,
            "model": self.engine.name,
        }

    def _usage(self, prompt: int, completion: int) -> dict[str, int]:
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }

    def whole(self, text: str, finish: str, prompt: int, completion: int) -> dict[str, Any]:
        if self.chat:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish,
            }
        else:
            choice = {"index": 0, "text": text, "finish_reason": finish, "logprobs": None}
        return self._head() | {"choices": [choice], "usage": self._usage(prompt, completion)}

    def _chunk(self, text: str, finish: str | None, first: bool = False) -> str:
        if self.chat:
            delta: dict[str, Any] = {"content": text}
            if first:
                delta["role"] = "assistant"
            choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
            head = self._head(".chunk")
        else:
            choice = {"index": 0, "text": text, "finish_reason": finish, "logprobs": None}
            head = self._head()
        return _sse(head | {"choices": [choice]})

    async def events(
        self,
        pieces: AsyncIterator[tuple[str, str]],
        prompt: int,
        produced: list[int],
        usage: bool,
    ) -> AsyncIterator[str]:
        first = True
        async for piece, finish in pieces:
            if piece or finish:
                yield self._chunk(piece, finish or None, first)
                first = False
        if usage:
            head = self._head(".chunk" if self.chat else "")
            yield _sse(head | {"choices": [], "usage": self._usage(prompt, len(produced))})
        yield "data: [DONE]\n\n"


def _sse(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


def model_missing(model: str) -> str:
    """Why `model` is no model folder (before the loader hides it behind a tokenizer error),
    or "" when it may be one."""
    folder = Path(model)
    if not folder.is_dir():
        return f"the model folder {model} does not exist"
    if not (folder / "config.json").is_file():
        kind = "is empty" if not any(folder.iterdir()) else "holds no config.json"
        return f"the model folder {model} {kind}: it holds no transformers model"
    return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.local.serve", description=__doc__)
    parser.add_argument("--model", required=True, help="a transformers model directory")
    parser.add_argument("--adapter", help="a peft adapter directory (applied when it has one)")
    parser.add_argument("--name", required=True, help="the model's name in the API")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    missing = model_missing(args.model)
    if missing:
        print(missing, flush=True)  # the server log's last words: the app's reason
        return 2
    import uvicorn

    engine = Engine(args.model, args.adapter, args.name)
    print(f"serving {args.name} on http://{args.host}:{args.port}/v1 ({engine.device})", flush=True)
    uvicorn.run(
        make_app(engine),
        host=args.host,
        port=args.port,
        access_log=False,  # a request's line is not logged: nothing of its headers either
        log_level="warning",
        timeout_graceful_shutdown=5,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
