"""What README.md and docs/ say about the public API is what the code is.

Every signature they give of a public function (``instrument(*, tracer_provider=None, ...)``, as
opposed to a call such as ``action(conversation_id=...)`` or ``race(...)``) must have the code's
parameters, in order, of the same kind and with the same defaults.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

import firsttoken

ROOT = Path(__file__).parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _is_api(obj: object) -> bool:
    return callable(obj) and not (isinstance(obj, type) and issubclass(obj, Warning | Exception))


PUBLIC = {name: getattr(firsttoken, name) for name in [*firsttoken.__all__, "race", "arace"]}
PUBLIC = {name: obj for name, obj in PUBLIC.items() if _is_api(obj)}
"""instrument(), action(), phase() ... (action and the other scopes are classes: their __init__ counts)."""
_SPAN = re.compile(r"`(?:firsttoken\.)?([a-z_]+)\(([^`]*)\)`")


def _documented() -> list[tuple[str, str, str]]:
    """(where, name, parameter text) of every backticked signature of a public function."""
    found = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8").replace("\n", " ")
        for match in _SPAN.finditer(text):
            name, params = match.groups()
            if name not in PUBLIC or not params.strip():
                continue
            try:
                tree = ast.parse(f"def f({params}): pass")
            except SyntaxError:
                continue  # a call with literal arguments, or race(...)
            if _is_signature(tree.body[0].args):  # type: ignore[attr-defined]
                found.append((path.relative_to(ROOT).as_posix(), name, params))
    return found


def _is_signature(args: ast.arguments) -> bool:
    """``phase(name)``, ``instrument(*, tracer_provider=None, **options)``: a parameter without a
    default, or ``*`` / ``**``, and only literal defaults. Not a call such as
    ``instrument(capture_content=True)``, ``instrument(tracer_provider=provider)`` or
    ``action(conversation_id=...)``."""
    positional = [*args.posonlyargs, *args.args]
    defaults = [*args.defaults, *(d for d in args.kw_defaults if d is not None)]
    for d in defaults:
        try:
            if ast.literal_eval(d) is Ellipsis:
                return False
        except ValueError:
            return False
    return bool(args.vararg or args.kwarg or args.kwonlyargs or len(args.defaults) < len(positional))


def _shape(signature: inspect.Signature) -> list[tuple[str, Any, Any]]:
    return [(p.name, p.kind, p.default) for p in signature.parameters.values()]


def _parsed(params: str) -> inspect.Signature:
    args: Any = ast.parse(f"def f({params}): pass").body[0].args  # type: ignore[attr-defined]
    out = []
    kind = inspect.Parameter
    positional = [*args.posonlyargs, *args.args]
    defaults = [inspect.Parameter.empty] * (len(positional) - len(args.defaults)) + [
        ast.literal_eval(d) for d in args.defaults
    ]
    for i, a in enumerate(positional):
        k = kind.POSITIONAL_ONLY if i < len(args.posonlyargs) else kind.POSITIONAL_OR_KEYWORD
        out.append(kind(a.arg, k, default=defaults[i]))
    if args.vararg:
        out.append(kind(args.vararg.arg, kind.VAR_POSITIONAL))
    for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        out.append(
            kind(a.arg, kind.KEYWORD_ONLY, default=inspect.Parameter.empty if d is None else ast.literal_eval(d))
        )
    if args.kwarg:
        out.append(kind(args.kwarg.arg, kind.VAR_KEYWORD))
    return inspect.Signature(out)


def test_the_docs_give_signatures_to_check() -> None:
    names = {name for _, name, _ in _documented()}
    assert {"instrument", "action", "phase", "conversation"} <= names, names


@pytest.mark.parametrize(("where", "name", "params"), _documented())
def test_a_documented_signature_is_the_codes(where: str, name: str, params: str) -> None:
    real = inspect.signature(PUBLIC[name])
    assert _shape(_parsed(params)) == _shape(real), f"{where}: {name}({params}) but the code has {name}{real}"


def test_the_readme_names_the_oldest_sdks_that_compat_pins() -> None:
    """scripts/compat.sh pins pyproject.toml's lower bounds; the README says which those are."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    readme = (ROOT / "README.md").read_text().replace("\n", " ")
    for sdk in ("openai", "anthropic"):
        (requirement,) = extras[sdk]
        low = re.fullmatch(rf"{sdk}>=([\d.]+),<\d+", requirement)
        assert low is not None, requirement
        pinned = low.group(1) + ".0" * (2 - low.group(1).count("."))
        assert f"{sdk} {pinned}" in readme, (sdk, pinned)
