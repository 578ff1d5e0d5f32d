"""SDKs read on the wire that retry a call themselves: the call and its retries are one call span.

google-genai (tenacity, as its ``HttpRetryOptions`` say; and its async client's own retry of an
aiohttp connection error), mistralai (Speakeasy's backoff, as a ``RetryConfig`` says) and cohere
(Fern's ``max_retries``: 2 by default in cohere 7, none in 5.9; whole answers only, its streams are
not retried) send every attempt as a request of its own, which the wire path would read as a call
each. Their retry loop is wrapped here (the one function every call and
all its attempts go through) in a :class:`~firsttoken.transport.RetryLoop`: the attempts sent inside
it are one call, with its attempt count and attempt events, its ``retry_wait`` phase and its retry
counted once per retry, as an openai SDK call and its retries are; a failed attempt ends the call
only when the loop gives up, with the last attempt's failure. What the SDK returns or raises is
untouched.

Patched when the app imports the SDK's module (the names are in ``_install``'s hooks).
"""

from __future__ import annotations

from typing import Any

from .._internal import internal_error
from .._patch import Patches
from ..transport import RETRY_LOOP, RetryLoop

LOOPS: dict[str, tuple[str, str]] = {
    "google.genai._api_client": ("BaseApiClient._request", "BaseApiClient._async_request"),
    "mistralai.client.basesdk": ("BaseSDK.do_request", "BaseSDK.do_request_async"),  # mistralai 2 and 3
    "mistralai.azure.client.basesdk": ("BaseSDK.do_request", "BaseSDK.do_request_async"),
    "mistralai.gcp.client.basesdk": ("BaseSDK.do_request", "BaseSDK.do_request_async"),
    "mistralai.basesdk": ("BaseSDK.do_request", "BaseSDK.do_request_async"),  # mistralai 1
    "mistralai_azure.basesdk": ("BaseSDK.do_request", "BaseSDK.do_request_async"),
    "mistralai_gcp.basesdk": ("BaseSDK.do_request", "BaseSDK.do_request_async"),
    "cohere.core.http_client": ("HttpClient.request", "AsyncHttpClient.request"),
}
"""Module -> the sync and async function that runs one call's retry loop, in each SDK."""


def _end(loop: RetryLoop, exc: BaseException | None) -> None:
    try:
        loop.end(exc)
    except Exception:
        internal_error("ending an SDK's retry loop failed")


def _loop(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if RETRY_LOOP.get() is not None:  # inside the loop already (cohere's retries call it again)
        return wrapped(*args, **kwargs)
    loop = RetryLoop()
    token = RETRY_LOOP.set(loop)
    try:
        result = wrapped(*args, **kwargs)
    except BaseException as exc:
        _end(loop, exc)
        raise
    finally:
        RETRY_LOOP.reset(token)
    _end(loop, None)
    return result


async def _loop_async(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if RETRY_LOOP.get() is not None:
        return await wrapped(*args, **kwargs)
    loop = RetryLoop()
    token = RETRY_LOOP.set(loop)
    try:
        result = await wrapped(*args, **kwargs)
    except BaseException as exc:
        _end(loop, exc)
        raise
    finally:
        RETRY_LOOP.reset(token)
    _end(loop, None)
    return result


def patch(patches: Patches, module: str) -> bool:
    """Wrap the retry loop of the SDK module ``module`` (a key of :data:`LOOPS`), just imported."""
    sync_path, async_path = LOOPS[module]
    ok = patches.wrap(module, sync_path, _loop)
    return patches.wrap(module, async_path, _loop_async) and ok
