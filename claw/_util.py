"""Small class-level tools shared across claw: no public constructor, runtime final."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn, TypeVar

T = TypeVar("T")


class NoPublicConstructor(type):
    """Metaclass: ``Cls(...)`` raises TypeError; the library builds with ``Cls._create(...)``.

    For objects only claw may create (a host, a scope, a run, a plugin API facet).
    """

    def __call__(cls, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError(
            f"{cls.__module__}.{cls.__qualname__} has no public constructor; "
            "claw creates it for you"
        )

    def _create(cls: type[T], *args: Any, **kwargs: Any) -> T:
        return super().__call__(*args, **kwargs)  # type: ignore[misc, no-any-return]


def final(cls: type[T]) -> type[T]:
    """Make subclassing ``cls`` raise TypeError at class creation (typing.final does not)."""

    def __init_subclass__(subcls: type, /, **kwargs: Any) -> NoReturn:
        raise TypeError(f"{cls.__module__}.{cls.__qualname__} is final and cannot be subclassed")

    cls.__init_subclass__ = classmethod(__init_subclass__)  # type: ignore[assignment]
    return cls


def fixup_module_metadata(module_name: str, namespace: dict[str, Any]) -> None:
    """Make public names report the public module (``claw.MemoryAudience``) in reprs.

    Only objects defined in a private submodule of the package are rewritten; the walk
    also covers methods so tracebacks and docs show the public path.
    """
    seen: set[int] = set()

    def fix(qualname: str, obj: object) -> None:
        if id(obj) in seen:
            return
        seen.add(id(obj))
        mod = getattr(obj, "__module__", None)
        if not isinstance(mod, str) or not mod.startswith(module_name + "._"):
            return
        try:
            obj.__module__ = module_name
        except (AttributeError, TypeError):  # pragma: no cover - builtins, slots
            return
        if isinstance(obj, type):
            for attr_name, attr_value in obj.__dict__.items():
                if not attr_name.startswith("_") or attr_name in ("__init__",):
                    fix(f"{qualname}.{attr_name}", attr_value)

    for name, obj in namespace.items():
        if not name.startswith("_"):
            fix(name, obj)


@contextmanager
def collapse_single_exception_group() -> Iterator[None]:
    """Re-raise the lone exception of a one-member exception group, as itself.

    Nurseries wrap every error in an ExceptionGroup (trio >= 0.25). Where the body of a
    claw scope raised one meaningful error, the caller should be able to catch that
    error by its own type; groups of several errors propagate unchanged.
    """
    try:
        yield
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1 and not isinstance(group.exceptions[0], BaseExceptionGroup):
            exc = group.exceptions[0]
            raise exc from exc.__cause__
        raise
