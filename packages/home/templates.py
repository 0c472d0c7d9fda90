"""Home Assistant's MQTT templates (``value_template``, ``command_template`` …), rendered in a
sandboxed Jinja2 environment (:class:`jinja2.sandbox.ImmutableSandboxedEnvironment`).

A template comes from a device's discovery config — untrusted — so rendering is bounded and
never raises: :func:`render` gives ``None`` for a template that does not parse, fails, or
would cost too much. What a template may use is what device firmwares publish: ``value``,
``value_json`` (the payload as JSON, undefined when it is not JSON), expressions, ``if``,
tests, filters from a short list (``float``, ``int``, ``round``, ``lower``, ``upper``,
``trim``, ``default``, ``replace``, ``tojson``, ``from_json``, ``is_defined``, ``iif``,
``bool``, ``abs``, ``string``, ``length``, ``first``, ``last``, ``min``, ``max``, ``join``).
Loops, macros, assignments, includes and calls (but of ``float()``, ``int()``,
``bool()``, ``iif()``) are refused (a discovery template
needs none of them, and they are how a template would make rendering cost without bound);
``*``, ``**``, ``%`` and ``+`` are checked before they run, and the source and the result
are capped.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from jinja2 import nodes
from jinja2.runtime import Undefined
from jinja2.sandbox import ImmutableSandboxedEnvironment

MAX_SOURCE = 4096
"""characters of a template's source"""
MAX_RESULT = 16 * 1024
"""characters of a rendered template (longer: no result)"""
MAX_PAYLOAD = 64 * 1024
"""characters of a payload handed to a template"""
_REFUSED = (
    nodes.For,
    nodes.Macro,
    nodes.CallBlock,
    nodes.FilterBlock,
    nodes.Assign,
    nodes.AssignBlock,
    nodes.With,
    nodes.Scope,
    nodes.Include,
    nodes.Import,
    nodes.FromImport,
    nodes.Extends,
    nodes.Block,
)


class TooCostly(Exception):
    """an operation a template may not do"""


def _sized(x: object) -> int:
    return len(x) if isinstance(x, str | bytes | list | tuple) else 0


def _number(value: Any, default: Any = 0) -> Any:
    try:
        if isinstance(value, str) and len(value) > 64:
            return default
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return default


def _int(value: Any, default: int = 0, base: int = 10) -> int:
    try:
        if isinstance(value, str):
            if len(value) > 64:
                return default
            return int(value, base) if base != 10 else int(float(value))
        f = float(value)
        return int(f) if math.isfinite(f) else default
    except (TypeError, ValueError, OverflowError):
        return default


def _round(value: Any, precision: int = 0, method: str = "common", default: Any = None) -> Any:
    f = _number(value, None)
    if f is None or not math.isfinite(f):
        return value if default is None else default
    p = max(0, min(15, _int(precision)))
    return round(f, p) if p else round(f)


def _replace(value: Any, old: Any, new: Any, count: Any = None) -> str:
    s, o, n = str(value), str(old), str(new)
    times = s.count(o) if o else len(s) + 1
    if len(s) + times * max(0, len(n) - len(o)) > MAX_RESULT:
        raise TooCostly("replace")
    return s.replace(o, n) if count is None else s.replace(o, n, _int(count))


def _from_json(value: Any) -> Any:
    text = str(value)
    if len(text) > MAX_PAYLOAD:
        raise TooCostly("from_json")
    return json.loads(text)


def _tojson(value: Any) -> str:
    out = json.dumps(value, ensure_ascii=False, default=str)
    if len(out) > MAX_RESULT:
        raise TooCostly("tojson")
    return out


def _bool(value: Any, default: Any = False) -> Any:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on", "enable"):
        return True
    if text in ("0", "false", "no", "off", "disable"):
        return False
    return default


def _iif(value: Any, if_true: Any = True, if_false: Any = False, if_none: Any = ...) -> Any:
    if value is None and if_none is not ...:
        return if_none
    return if_true if value else if_false


def _join(value: Any, sep: str = "") -> str:
    items = [str(x) for x in value] if isinstance(value, list | tuple) else [str(value)]
    if sum(map(len, items)) + len(sep) * len(items) > MAX_RESULT:
        raise TooCostly("join")
    return str(sep).join(items)


FILTERS: dict[str, Callable[..., Any]] = {
    "float": _number,
    "int": _int,
    "round": _round,
    "abs": lambda v: abs(_number(v)),
    "lower": lambda v: str(v).lower(),
    "upper": lambda v: str(v).upper(),
    "trim": lambda v: str(v).strip(),
    "string": str,
    "length": lambda v: len(v) if isinstance(v, str | list | tuple | dict) else 0,
    "count": lambda v: len(v) if isinstance(v, str | list | tuple | dict) else 0,
    "first": lambda v: v[0] if isinstance(v, str | list | tuple) and v else None,
    "last": lambda v: v[-1] if isinstance(v, str | list | tuple) and v else None,
    "min": lambda v: min(v) if isinstance(v, list | tuple) and v else None,
    "max": lambda v: max(v) if isinstance(v, list | tuple) and v else None,
    "replace": _replace,
    "join": _join,
    "tojson": _tojson,
    "to_json": _tojson,
    "from_json": _from_json,
    "bool": _bool,
    "iif": _iif,
    "is_defined": lambda v: v,
}


class _Sandbox(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**", "%", "+", "//"})

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "**":
            if abs(_number(right, 0)) > 64 or abs(_number(left, 0)) > 1e6:
                raise TooCostly("**")
            return left**right
        if operator == "*":
            n = right if _sized(left) else left if _sized(right) else None
            if n is not None and (_sized(left) + _sized(right)) * abs(_int(n)) > MAX_RESULT:
                raise TooCostly("*")
            return left * right
        if operator == "%":
            if isinstance(left, str):
                raise TooCostly("%")  # string formatting
            return left % right
        if operator == "+":
            if _sized(left) + _sized(right) > MAX_RESULT:
                raise TooCostly("+")
            return left + right
        return left // right

    def getattr(self, obj: Any, attribute: str) -> Any:
        # a JSON object's key before a method of the same name (value_json.items)
        if isinstance(obj, dict) and attribute in obj:
            return obj[attribute]
        if isinstance(obj, dict | list | str):
            return self.undefined(obj=obj, name=attribute)
        return super().getattr(obj, attribute)


_ENV = _Sandbox(autoescape=False, cache_size=0)
_ENV.filters = dict(FILTERS)
_ENV.filters["default"] = _ENV.filters["d"] = lambda v, d="", b=False: (
    d if isinstance(v, Undefined) or (b and not v) else v
)
_ENV.globals = {"float": _number, "int": _int, "bool": _bool, "iif": _iif}


@lru_cache(maxsize=512)
def _compiled(source: str) -> Any:
    """The template, or ``None`` when it may not run here."""
    try:
        if len(source) > MAX_SOURCE:
            return None
        tree = _ENV.parse(source)
        if any(True for _ in tree.find_all(_REFUSED)):
            return None
        for call in tree.find_all(nodes.Call):  # only the globals below, never a method
            if not (isinstance(call.node, nodes.Name) and call.node.name in _ENV.globals):
                return None
        return _ENV.from_string(tree)
    except Exception:  # a template that does not parse has no result
        return None


def _json(payload: str) -> Any:
    try:
        return json.loads(payload)
    except (ValueError, RecursionError):
        return Undefined(name="value_json")


def render(source: str, payload: str, **variables: Any) -> str | None:
    """``source`` rendered with ``value`` (the payload) and ``value_json``; ``None`` if it
    cannot be (see the module doc). Never raises."""
    try:
        template = _compiled(source)
        if template is None or len(payload) > MAX_PAYLOAD:
            return None
        out = template.render(value=payload, value_json=_json(payload), **variables)
        if not isinstance(out, str) or len(out) > MAX_RESULT:
            return None
        return out.strip()
    except Exception:  # untrusted template: no result
        return None


def render_value(source: str, value: Any, **variables: Any) -> str | None:
    """A command template rendered with ``value`` (a number or payload string)."""
    try:
        template = _compiled(source)
        if template is None:
            return None
        out = template.render(value=value, **variables)
        if not isinstance(out, str) or len(out) > MAX_RESULT:
            return None
        return out.strip()
    except Exception:  # untrusted template: no result
        return None
