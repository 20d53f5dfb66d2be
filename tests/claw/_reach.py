"""An attribute walk: what a plugin can reach from an object through plain attribute access.

:func:`find_minting_power` walks breadth-first from the objects a plugin receives over
instance attributes (``__dict__`` and ``__slots__``, including evaluated properties),
container items, the ``__self__`` and ``__func__`` of bound methods, a function's
closure cells, defaults and ``__wrapped__``, ``functools.partial`` parts, the weak
references to an object (``weakref.getweakrefs``, which anyone holding the object can
call), their referents and their callbacks (``__callback__``), and reports every path
that ends at the host, a capability registry, a host scope, the session store (whose
listeners revoke) or a mint function.

It does not follow what needs interpreter introspection rather than attributes: module
globals (a function's ``__globals__``, ``sys.modules``), classes, frames and the
coroutines and generators that own them, and ``gc``. The threat model
(``docs/threat-model.md``) states that those remain.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import re
import types
import weakref
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from claw._capabilities import CapabilityRegistry
from claw._host import Host, HostScope
from claw.sessions import SessionStore

FORBIDDEN: tuple[type, ...] = (Host, CapabilityRegistry, HostScope, SessionStore)

_OPAQUE = (
    types.ModuleType,
    type,
    types.FrameType,
    types.CodeType,
    types.CoroutineType,
    types.GeneratorType,
    types.AsyncGeneratorType,
    types.TracebackType,
    str,
    bytes,
    bytearray,
    int,
    float,
    complex,
    bool,
    type(None),
    memoryview,
    range,
)

_MINT_NAME = re.compile(r"(^|\.)_?mint(_|$)")


def _is_mint_function(obj: object) -> bool:
    func = getattr(obj, "__func__", obj)
    if not isinstance(func, types.FunctionType):
        return False
    return func.__module__.startswith("claw") and bool(_MINT_NAME.search(func.__qualname__))


def _slot_names(cls: type) -> Iterator[str]:
    slots = cls.__dict__.get("__slots__", ())
    if isinstance(slots, str):
        slots = (slots,)
    for name in slots:
        if name.startswith("__") and not name.endswith("__"):
            yield f"_{cls.__name__.lstrip('_')}{name}"
        else:
            yield name


def _children(obj: object) -> Iterator[tuple[str, object]]:
    if isinstance(obj, Mapping | types.MappingProxyType):
        try:
            items = list(obj.items())
        except Exception:
            items = []
        for key, value in items:
            yield f"[{key!r}]", value
            yield f"<key {key!r}>", key
    if isinstance(obj, list | tuple | set | frozenset | collections.deque | weakref.WeakSet):
        for index, item in enumerate(list(obj)):
            yield f"[{index}]", item
    if isinstance(obj, weakref.ref):
        yield "()", obj()
        # A callback runs with the dead reference; whatever it holds (a closure, its
        # defaults, a bound method's object) is one attribute away from the reference.
        yield ".__callback__", obj.__callback__
    # Every weak reference to an object is one call away from it:
    # weakref.getweakrefs(obj) lists them (and a proxy forwards to obj itself).
    with contextlib.suppress(TypeError):
        for index, ref in enumerate(weakref.getweakrefs(obj)):
            if isinstance(ref, weakref.ref):
                yield f"<weakref.getweakrefs()[{index}]>", ref
    if isinstance(obj, types.MethodType):
        yield ".__self__", obj.__self__
        yield ".__func__", obj.__func__
        return
    if isinstance(obj, types.BuiltinMethodType | types.MethodWrapperType):
        yield ".__self__", getattr(obj, "__self__", None)
        return
    if isinstance(obj, types.CellType):
        with contextlib.suppress(ValueError):
            yield ".cell_contents", obj.cell_contents
        return
    if isinstance(obj, types.FunctionType):
        for index, cell in enumerate(obj.__closure__ or ()):
            yield f".__closure__[{index}]", cell
        yield ".__defaults__", obj.__defaults__
        yield ".__kwdefaults__", obj.__kwdefaults__
        yield ".__dict__", obj.__dict__
        return
    if isinstance(obj, functools.partial):
        yield ".func", obj.func
        yield ".args", obj.args
        yield ".keywords", obj.keywords
    if isinstance(obj, property | staticmethod | classmethod):
        return
    instance_dict = getattr(obj, "__dict__", None)
    if isinstance(instance_dict, dict):
        for name, value in list(instance_dict.items()):
            yield f".{name}", value
    for cls in type(obj).__mro__:
        for name in _slot_names(cls):
            if name in ("__weakref__", "__dict__"):
                continue
            with contextlib.suppress(AttributeError):
                yield f".{name}", getattr(obj, name)
        if cls.__module__ == "builtins":
            continue
        for name, attr in list(vars(cls).items()):
            if isinstance(attr, property | functools.cached_property):
                with contextlib.suppress(Exception):
                    yield f".{name}", getattr(obj, name)


def find_minting_power(roots: Mapping[str, object], *, limit: int = 200_000) -> list[str]:
    """Every attribute path from ``roots`` to the host, a registry, a scope or a mint function."""
    found: list[str] = []
    seen: set[int] = set()
    keep: list[object] = []  # keep walked objects alive so ids stay unique
    queue: collections.deque[tuple[object, str]] = collections.deque(
        (obj, name) for name, obj in roots.items()
    )
    while queue and len(seen) < limit:
        obj, path = queue.popleft()
        if id(obj) in seen or isinstance(obj, _OPAQUE):
            continue
        seen.add(id(obj))
        keep.append(obj)
        if isinstance(obj, FORBIDDEN):
            found.append(f"{path} -> {type(obj).__name__}")
            continue
        if _is_mint_function(obj):
            found.append(f"{path} -> mint function {getattr(obj, '__qualname__', obj)}")
            continue
        for step, child in _children(obj):
            if id(child) not in seen and not isinstance(child, _OPAQUE):
                queue.append((child, path + step))
    assert not queue, f"the walk stopped at its limit of {limit} objects"
    return found


def walk_count(roots: Iterable[object]) -> int:
    """How many objects a walk from ``roots`` visits (to show the walk is not vacuous)."""
    return walk_routes(roots)["objects"]


#: How :func:`walk_routes` names the kind of each step, by how its label starts.
_ROUTE_KINDS = (
    ("<weakref.getweakrefs()", "weak references listed (getweakrefs)"),
    (".__callback__", "weak reference callbacks"),
    ("()", "weak references followed to their object"),
    (".__closure__", "closure cells"),
    (".cell_contents", "closure cell contents"),
    (".__defaults__", "defaults"),
    (".__kwdefaults__", "defaults"),
    (".__self__", "bound objects"),
    (".__func__", "bound functions"),
    ("[", "container items"),
    ("<key", "container keys"),
)


def walk_routes(roots: Iterable[object]) -> collections.Counter[str]:
    """What a walk from ``roots`` tried, by kind of step (each step out of each object
    it visited), and ``"objects"``: how many objects it visited. For the closing figures
    of the reach test (issue 25), and to show the weak-reference routes are walked."""
    counts: collections.Counter[str] = collections.Counter()
    seen: set[int] = set()
    keep: list[object] = []
    queue = collections.deque(roots)
    while queue:
        obj = queue.popleft()
        if id(obj) in seen or isinstance(obj, _OPAQUE):
            continue
        seen.add(id(obj))
        keep.append(obj)
        counts["objects"] += 1
        for step, child in _children(obj):
            kind = next((k for prefix, k in _ROUTE_KINDS if step.startswith(prefix)), None)
            counts[kind or "attributes"] += 1
            queue.append(child)
    return counts


def reaches(obj: Any, target: object) -> bool:
    """Whether the walk from ``obj`` reaches ``target`` (a self-check of the walk)."""
    seen: set[int] = set()
    keep: list[object] = []
    queue = collections.deque([obj])
    while queue:
        current = queue.popleft()
        if current is target:
            return True
        if id(current) in seen or isinstance(current, _OPAQUE):
            continue
        seen.add(id(current))
        keep.append(current)
        queue.extend(child for _, child in _children(current))
    return False
