"""Group.version tells a policy that keeps what it worked out from a group's classes (DRF's _prune) when that is
stale: it changes when a class joins or leaves the group, not when a class only gains or loses jobs."""

from __future__ import annotations

from loadmaster.scheduling.queue_index import Group, JobClass


def test_version_changes_only_when_the_set_of_classes_does() -> None:
    group = Group()
    a, b = JobClass(0, "a"), JobClass(1, "b")
    group.count_in(a)
    joined = group.version
    group.count_in(a)  # another job of a class already there
    assert group.version == joined and group.classes == {a: 2}
    group.count_in(b)
    assert group.version > joined
    both = group.version
    group.count_out(a)  # a keeps a job
    assert group.version == both and group.classes == {a: 1, b: 1}
    group.count_out(a)  # a leaves
    assert group.version > both and group.classes == {b: 1}
