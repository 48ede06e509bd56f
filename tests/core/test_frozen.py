"""fast_init (core/frozen.py): the faster __init__ of frozen, slotted dataclasses builds the objects the
generated one builds, and the classes stay frozen."""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import InitVar, dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadmaster.core.frozen import fast_init, lazy_attribute
from loadmaster.core.job import Allocation, JobSpec, JobStatus
from loadmaster.scheduling.plan import Plan, Start
from loadmaster.scheduling.snapshot import JobView
from loadmaster.sim.failures import AttemptPlan


@dataclass(frozen=True, slots=True)
class _Generated:
    a: int
    b: float = 1.5
    c: tuple[int, ...] = ()
    d: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "d", f"{self.a}:{self.b}")


@fast_init
@dataclass(frozen=True, slots=True)
class _Fast:
    a: int
    b: float = 1.5
    c: tuple[int, ...] = ()
    d: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "d", f"{self.a}:{self.b}")


@given(a=st.integers(), b=st.floats(allow_nan=False), c=st.lists(st.integers(), max_size=3).map(tuple),
       how=st.sampled_from(["positional", "keywords", "defaults"]))
def test_the_fast_init_builds_what_the_generated_one_builds(a: int, b: float, c: tuple[int, ...], how: str) -> None:
    if how == "positional":
        gen, fast = _Generated(a, b, c), _Fast(a, b, c)
    elif how == "keywords":
        gen, fast = _Generated(c=c, a=a, b=b), _Fast(c=c, a=a, b=b)
    else:
        gen, fast = _Generated(a), _Fast(a)
    assert dataclasses.astuple(gen) == dataclasses.astuple(fast)
    assert (gen.a, gen.b, gen.c, gen.d) == (fast.a, fast.b, fast.c, fast.d)
    assert repr(gen).replace("_Generated", "_Fast") == repr(fast)
    assert hash(dataclasses.replace(fast, a=a)) == hash(fast)


@fast_init
@dataclass(frozen=True)
class _FastDict:
    a: int
    b: tuple[int, ...] = ()


def test_a_class_without_slots_gets_its_fields_in_its_dict() -> None:
    fast = _FastDict(1)
    assert fast.__dict__ == {"a": 1, "b": ()}
    assert _FastDict(b=(2,), a=1) == _FastDict(1, (2,))
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.a = 2  # type: ignore[misc]


def test_the_class_stays_frozen_and_picklable() -> None:
    fast = _Fast(1, 2.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.a = 2  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(fast)) == fast
    with pytest.raises(TypeError):
        _Fast()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        _Fast(1, e=2)  # type: ignore[call-arg]


def test_the_library_classes_keep_their_signature_and_checks() -> None:
    spec = JobSpec("j", "t", 0.0, 1, 4, 10.0, type_speed=(("k80", 0.0), ("v100", 1.0)))
    assert spec.excluded_types == ("k80",)  # __post_init__ ran
    with pytest.raises(ValueError, match="job_id is empty"):
        JobSpec("", "t", 0.0, 1, 1, 1.0)
    alloc = Allocation("j", (3, 3), 4, 0.0, 0.0)
    view = JobView(spec, 1.0, 2, alloc, work_done_s=5.0)
    assert (view.attempt, view.allocation, view.work_done_s, view.rate, view.started_at) == (2, alloc, 5.0, 0.0, None)
    assert Start("j", alloc).allocation is alloc
    assert AttemptPlan((1.0,), (), JobStatus.COMPLETED).attempts == 1
    assert Plan(starts=(Start("j", alloc),)).starts[0].job_id == "j" and Plan().waits == ()
    for cls in (JobSpec, Allocation, JobView, Start, AttemptPlan, Plan):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(cls.__new__(cls), dataclasses.fields(cls)[0].name, None)


def test_what_it_cannot_build_is_refused() -> None:
    @dataclass
    class Mutable:
        a: int

    @dataclass(frozen=True, slots=True)
    class Factory:
        a: list[int] = field(default_factory=list)

    @dataclass(frozen=True, slots=True)
    class WithInitVar:
        a: int
        b: InitVar[int] = 0

        def __post_init__(self, b: int) -> None:
            pass

    for cls in (Mutable, Factory, WithInitVar):
        with pytest.raises(TypeError, match="fast_init"):
            fast_init(cls)


@dataclass(frozen=True, slots=True)
class _WideGenerated:
    a: int
    b: float
    c: str = ""
    d: tuple[int, ...] = ()
    e: int | None = None


@fast_init
@dataclass(frozen=True, slots=True)
class _Wide:
    a: int
    b: float
    c: str = ""
    d: tuple[int, ...] = ()
    e: int | None = None


class _WideChild(_Wide):  # no slots of its own: a __dict__, a layout the twin does not share
    pass


@given(a=st.integers(), b=st.floats(allow_nan=False), c=st.text(max_size=3),
       e=st.none() | st.integers(), child=st.booleans())
def test_a_wide_class_is_built_through_its_twin_and_stays_itself(a: int, b: float, c: str, e: int | None,
                                                                    child: bool) -> None:
    """Four fields or more: stored while the object is of the plain twin class, then given back its class; an
    object of a subclass is built through the slot descriptors. Either way the generated __init__'s object."""
    fast = (_WideChild if child else _Wide)(a, b, c, e=e)
    gen = _WideGenerated(a, b, c, e=e)
    assert type(fast) is (_WideChild if child else _Wide)
    assert dataclasses.astuple(fast) == dataclasses.astuple(gen)
    assert repr(gen).replace("_WideGenerated", "_WideChild" if child else "_Wide") == repr(fast)
    assert fast == dataclasses.replace(fast) and hash(fast) == hash(dataclasses.replace(fast))
    assert pickle.loads(pickle.dumps(fast)) == fast
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.a = 1  # type: ignore[misc]


def test_the_bulk_classes_get_the_twin() -> None:
    for cls in (JobSpec, Allocation, JobView):
        assert "_twin" in cls.__init__.__code__.co_names  # type: ignore[misc]
    assert "_twin" not in Start.__init__.__code__.co_names  # two fields: through the descriptors
    spec = JobSpec("j", "t", 0.0, 1, 4, 10.0)
    assert type(spec) is JobSpec and type(JobView(spec, 1.0)) is JobView



@dataclass(frozen=True)
class _Lazy:
    base: int
    calls: list[int] = field(default_factory=list)

    @lazy_attribute
    def doubled(self) -> int:
        """Twice base."""
        self.calls.append(self.base)
        return 2 * self.base


def test_lazy_attribute_computes_once_and_keeps_the_class_frozen() -> None:
    obj = _Lazy(3)
    assert "doubled" not in obj.__dict__
    assert obj.doubled == 6 and obj.doubled == 6
    assert obj.calls == [3]  # computed on the first read only, then read from __dict__
    assert obj.__dict__["doubled"] == 6
    with pytest.raises(dataclasses.FrozenInstanceError):
        obj.doubled = 1  # type: ignore[misc]
    given_ = _Lazy(4)
    given_.__dict__["doubled"] = 5  # set by whoever made it (Snapshot.build): read without a call
    assert given_.doubled == 5 and given_.calls == []
    assert _Lazy.doubled.__doc__ == "Twice base."
