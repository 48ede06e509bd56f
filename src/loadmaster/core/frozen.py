"""A cheaper __init__ for frozen dataclasses made in bulk (job specs, job views, allocations, plans).

The __init__ that dataclasses generates for a frozen class stores each field with
object.__setattr__(self, name, value): a call that looks the name up on the type before it reaches the slot.
A simulation of 117,000 jobs makes about a million such objects, and that lookup was a tenth of its time.
fast_init() replaces the generated __init__ with one of the same signature that stores the fields without
that lookup, then calls __post_init__ as the generated one does. A slotted class's object is, while its
fields are stored, of a plain twin class with the same slots (one __class__ change there and one back): the
interpreter stores a plain class's slot attributes in one step, where a call of the slot descriptor's
__set__ goes through a generic wrapper (a 10-field JobView: ~1.5 -> ~0.8 us). An object of a subclass,
or of a class whose layout the twin cannot share, gets its fields through the slot descriptors instead.
A class without slots gets them in its __dict__. Nothing else changes:
the class keeps its own __setattr__ (assigning to a field still raises FrozenInstanceError), and its
equality, hash, repr, pickling and dataclasses.replace() are the ones dataclasses made.

lazy_attribute: functools.cached_property without the lock Python 3.11 takes on each object's first read
(Snapshot's derived values, one snapshot per decision).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import MISSING, fields
from typing import Any, Generic, TypeVar, overload

T = TypeVar("T")
Obj = TypeVar("Obj")


def fast_init(cls: type[T]) -> type[T]:
    """Class decorator, above @dataclass(frozen=True[, slots=True]): the faster __init__. Only plain fields
    are supported (positional, with or without a plain default); a field left out of __init__ must have no
    default (its __post_init__ sets it)."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen:
        raise TypeError(f"fast_init: {cls.__name__} is not a frozen dataclass")
    slotted = "__slots__" in cls.__dict__
    namespace: dict[str, Any] = {}
    args: list[str] = []
    names: list[str] = []  # the fields __init__ stores, in order
    for f in fields(cls):  # type: ignore[arg-type]
        if f.default_factory is not MISSING or f.kw_only:
            raise TypeError(f"fast_init: {cls.__name__}.{f.name} has a default factory or is keyword-only")
        if not f.init:
            if f.default is not MISSING:
                raise TypeError(f"fast_init: {cls.__name__}.{f.name} is left out of __init__ with a default")
            continue
        if f.default is MISSING:
            args.append(f.name)
        else:
            namespace[f"_default_{f.name}"] = f.default
            args.append(f"{f.name}=_default_{f.name}")
        names.append(f.name)
    if not slotted:
        body = ["    _d = self.__dict__", *(f"    _d[{n!r}] = {n}" for n in names)]
    else:
        namespace.update((f"_set_{n}", cls.__dict__[n].__set__) for n in names)
        sets = [f"_set_{n}(self, {n})" for n in names]
        twin = _twin(cls) if len(names) >= _TWIN_FIELDS else None
        if twin is None:
            body = [f"    {line}" for line in sets]
        else:
            namespace.update(_cls=cls, _twin=twin, _set_class=object.__setattr__)
            body = ["    if self.__class__ is _cls:", "        _set_class(self, '__class__', _twin)",
                    *(f"        self.{n} = {n}" for n in names), "        self.__class__ = _cls",
                    "    else:  # an object of a subclass", *(f"        {line}" for line in sets)]
    if hasattr(cls, "__post_init__"):
        body.append("    self.__post_init__()")
    source = f"def __init__(self, {', '.join(args)}):\n" + "\n".join(body or ["    pass"]) + "\n"
    exec(source, namespace)  # made from the class's own field names, as dataclasses makes the generated one
    init = namespace["__init__"]
    generated = cls.__init__
    if _parameters(init) != _parameters(generated):  # an InitVar, say: the generated one takes more
        raise TypeError(f"fast_init: {cls.__name__}'s __init__ takes parameters this one does not")
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = generated.__doc__
    setattr(cls, "__init__", init)  # noqa: B010 - mypy forbids assigning a method
    return cls


# The twin pays two __class__ changes: with fewer fields than this, the slot descriptors are cheaper (Start's
# two: 0.56 us through them, 0.69 through the twin; Allocation's five: 0.95 -> 0.65).
_TWIN_FIELDS = 4


def _twin(cls: type) -> type | None:
    """A plain class with `cls`'s slots, whose objects may become `cls`'s and back (__class__ assignment
    needs the same layout), or None where that is not so (a base class other than object, say)."""
    if cls.__bases__ != (object,):
        return None
    twin = type(f"_{cls.__name__}Fields", (), {"__slots__": cls.__dict__["__slots__"], "__module__": cls.__module__})
    try:
        probe: Any = object.__new__(cls)
        object.__setattr__(probe, "__class__", twin)
        probe.__class__ = cls
    except TypeError:
        return None
    return twin


def _parameters(fn: Any) -> list[tuple[str, Any]]:
    return [(p.name, p.default) for p in inspect.signature(fn).parameters.values()]


class lazy_attribute(Generic[Obj, T]):
    """functools.cached_property without its lock: the value is computed on the first read and stored in the
    object's __dict__ under the same name, where later reads find it before this (non-data) descriptor. On
    Python 3.11 cached_property takes an RLock on each object's first read (~1.3 us); a Snapshot, made per
    decision, is read through several of them once each. The object must have a __dict__; as with
    cached_property, a frozen dataclass stays frozen from the outside (the value goes into __dict__ without
    __setattr__), and a value already in __dict__ (set by whoever made the object) is read without a call."""

    def __init__(self, func: Callable[[Obj], T]) -> None:
        self.func = func
        self.name = func.__name__
        self.__doc__ = func.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> lazy_attribute[Obj, T]: ...

    @overload
    def __get__(self, obj: Obj, owner: type | None = None) -> T: ...

    def __get__(self, obj: Obj | None, owner: type | None = None) -> T | lazy_attribute[Obj, T]:
        if obj is None:
            return self
        value = obj.__dict__[self.name] = self.func(obj)
        return value
