"""Amazon Bedrock Runtime's own API, as boto3's ``bedrock-runtime`` client calls it (read on the wire).

``/model/{modelId}/converse`` and ``converse-stream`` take Bedrock's Converse shapes: content blocks,
an ``inferenceConfig``, and a stream of ``messageStart``, ``contentBlockDelta``, ``contentBlockStop``,
``messageStop`` (the ``stopReason``) and a last ``metadata`` event with the usage (cache reads and
writes apart from ``inputTokens``, as Anthropic counts them). ``/model/{modelId}/invoke`` and
``invoke-with-response-stream`` carry the model's own body (Anthropic's Messages API for Claude): a
streamed ``chunk`` event holds one event of the model's own JSON. Claude's (a ``type``) is read as the
anthropic format reads it; Amazon Nova's has the Converse stream's shapes; Llama's carries a
``generation``, Titan's an ``outputText``, Mistral's ``outputs[].text``. Bedrock adds
``amazon-bedrock-invocationMetrics`` (``inputTokenCount``, ``outputTokenCount``) to every model's last
chunk: the stream's end, with its usage.

The stream is AWS event-stream frames, not SSE: the client adapter (:mod:`firsttoken.transport_botocore`)
hands over each event as botocore parsed it (its parser checks the frames' CRCs), in botocore's
shape, ``{event type: member}``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

from .. import semconv as sc
from ..timeline import Timeline
from . import _common as common
from . import anthropic
from ._hooks import EVENT_END, EVENT_MORE, CallDescription, StreamState, WireFormat

_PATH = re.compile(r"/model/(?P<model>[^/]+)/(?P<op>converse|converse-stream|invoke|invoke-with-response-stream)")
_CONTENT_DELTAS = ("text", "toolUse", "reasoningContent")
"""What a ``contentBlockDelta`` carries that is generated output."""
_METRICS = "amazon-bedrock-invocationMetrics"
"""The member Bedrock adds to an InvokeModel stream's last chunk, whatever the model."""
_TEXT_KEYS = ("generation", "outputText", "text")
"""A non-Claude, non-Nova chunk's generated text: Meta Llama's, Amazon Titan's, a Mistral output's."""
_STOP_KEYS = ("stop_reason", "completionReason")
"""Its finish reason (Llama's, Titan's), on the last chunk."""
_OUTPUTS = "outputs"
"""A Mistral model's chunk: a list of outputs, each with a ``text`` and its ``stop_reason`` (null until the last)."""


def _model(path: str) -> str | None:
    found = _PATH.fullmatch(path)
    return unquote(found["model"]) if found is not None else None


def _converse_request(body: Mapping[str, Any]) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    config = body.get("inferenceConfig")
    if not isinstance(config, Mapping):
        return attrs
    if isinstance(config.get("maxTokens"), int):
        attrs[sc.GEN_AI_REQUEST_MAX_TOKENS] = config["maxTokens"]
    for key, attr in (("temperature", sc.GEN_AI_REQUEST_TEMPERATURE), ("topP", sc.GEN_AI_REQUEST_TOP_P)):
        value = config.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            attrs[attr] = float(value)
    stops = config.get("stopSequences")
    if isinstance(stops, list) and all(isinstance(s, str) for s in stops):
        attrs[sc.GEN_AI_REQUEST_STOP_SEQUENCES] = list(stops)
    return attrs


def read_usage(tl: Timeline, usage: Any) -> None:
    """Converse usage (the whole answer's, or the stream's ``metadata``) -> GenAI usage."""
    if not isinstance(usage, Mapping):
        return
    read, written = usage.get("cacheReadInputTokens"), usage.get("cacheWriteInputTokens")
    if isinstance(read, int):
        tl.cache_read_tokens = read
    if isinstance(written, int):
        tl.cache_creation_tokens = written
    uncached = usage.get("inputTokens")
    if isinstance(uncached, int):
        tl.input_tokens = uncached + (tl.cache_read_tokens or 0) + (tl.cache_creation_tokens or 0)
    output = usage.get("outputTokens")
    if isinstance(output, int):
        tl.output_tokens = output


def _read_converse(tl: Timeline, data: Mapping[str, Any]) -> None:
    reason = data.get("stopReason")
    if isinstance(reason, str):
        tl.finish_reasons[0] = reason
    read_usage(tl, data.get("usage"))
    message = (data.get("output") or {}).get("message")
    if tl.capture is not None and isinstance(message, Mapping) and message.get("content") is not None:
        tl.capture[sc.GEN_AI_OUTPUT_MESSAGES] = common.to_json([{"role": "assistant", "content": message["content"]}])


def _read_converse_event(tl: Timeline, event: Mapping[str, Any], now: int) -> int:
    delta_event = event.get("contentBlockDelta")
    if isinstance(delta_event, Mapping):
        delta = delta_event.get("delta")
        if isinstance(delta, Mapping) and any(key in delta for key in _CONTENT_DELTAS):
            tl.output_token(now)
            text = delta.get("text")
            if tl.capture is not None and isinstance(text, str):
                common.append_output(tl, text)
        return EVENT_MORE
    stop = event.get("messageStop")
    if isinstance(stop, Mapping):
        reason = stop.get("stopReason")
        if isinstance(reason, str):
            tl.finish_reasons[0] = reason
        tl.terminal_seen = True  # the answer is whole; the usage follows in ``metadata``
        return EVENT_MORE
    metadata = event.get("metadata")
    if isinstance(metadata, Mapping):
        read_usage(tl, metadata.get("usage"))
        return EVENT_END
    return EVENT_MORE


def _read_generated(tl: Timeline, chunk: Mapping[str, Any], now: int) -> None:
    """A chunk's (or a Mistral output's) generated text and finish reason, under whichever key its
    model uses: a non-empty text is a token."""
    for key in _TEXT_KEYS:
        text = chunk.get(key)
        if isinstance(text, str) and text:
            tl.output_token(now)
            if tl.capture is not None:
                common.append_output(tl, text)
    for key in _STOP_KEYS:
        reason = chunk.get(key)
        if isinstance(reason, str) and reason:
            tl.finish_reasons[0] = reason


def _read_model_event(tl: Timeline, event: Mapping[str, Any], now: int) -> int:
    """One InvokeModel stream chunk of a model other than Claude: Nova's (Converse's shapes), Llama's,
    Titan's or Mistral's; the last one, whatever the model, carries Bedrock's invocation metrics."""
    _read_generated(tl, event, now)
    outputs = event.get(_OUTPUTS)
    if isinstance(outputs, list):
        for output in outputs:
            if isinstance(output, Mapping):
                _read_generated(tl, output, now)
    verdict = _read_converse_event(tl, event, now)
    metrics = event.get(_METRICS)
    if not isinstance(metrics, Mapping):
        return verdict
    # The stream's last chunk: its usage, unless the model's own (Nova's ``metadata``) already told it.
    input_tokens, output_tokens = metrics.get("inputTokenCount"), metrics.get("outputTokenCount")
    if tl.input_tokens is None and isinstance(input_tokens, int):
        tl.input_tokens = input_tokens
    if tl.output_tokens is None and isinstance(output_tokens, int):
        tl.output_tokens = output_tokens
    return EVENT_END


class BedrockFormat(WireFormat):
    """Bedrock Runtime's Converse and InvokeModel paths (streamed or not)."""

    family = "bedrock"

    def match(self, path: str) -> tuple[str, str | None] | None:
        return (sc.OP_CHAT, None) if _PATH.fullmatch(path) is not None else None

    def describe(
        self, path: str, body: Mapping[str, Any], stream: bool, operation: str, api_type: str | None
    ) -> CallDescription:
        streamed = path.endswith("-stream")
        if "/converse" not in path:  # InvokeModel: the model's own body (Anthropic's for Claude)
            what = anthropic.FORMAT.describe(path, body, streamed, operation, api_type)
            what.model = _model(path)
            return what
        system, tools = body.get("system"), body.get("toolConfig")
        return CallDescription(
            operation=operation,
            model=_model(path),
            stream=streamed,
            request=_converse_request(body),
            content=lambda: anthropic.input_content(body),
            prefix=() if system is None and tools is None else (system, tools),
        )

    def default_provider(self, path: str) -> str:
        return "aws.bedrock"

    def read_result(self, tl: Timeline, data: Mapping[str, Any]) -> None:
        if "stopReason" in data or "output" in data:
            _read_converse(tl, data)
        else:
            anthropic.FORMAT.read_result(tl, data)

    def read_event(self, tl: Timeline, event: Mapping[str, Any], now: int, stream: StreamState) -> int:
        chunk = event.get("chunk")
        if isinstance(chunk, Mapping):  # InvokeModel's stream: one event of the model's own API
            try:
                inner = json.loads(chunk.get("bytes") or b"{}")
            except ValueError:  # not JSON: an event this reader does not know
                return EVENT_MORE
            if not isinstance(inner, Mapping):
                return EVENT_MORE
            if "type" in inner:  # Claude's: an event of Anthropic's Messages API
                return anthropic.FORMAT.read_event(tl, inner, now, stream)
            return _read_model_event(tl, inner, now)
        return _read_converse_event(tl, event, now)


FORMAT = BedrockFormat()
