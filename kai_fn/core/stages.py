"""Which pods KAI can gang together: a runtime's replicatedJobs in start waves, one PodGroup each.

KAI binds a gang only when ``minMember`` of its pods are pending together and all fit (FACTS.md §2). A
replicatedJob that ``dependsOn`` another is created by JobSet only once that one is ``Complete`` (its pods have
finished, and KAI's scheduler no longer sees finished pods at all: its pod informer drops Succeeded and Failed) or
``Ready`` (its pods are already bound and running). So a replicatedJob and one it depends on are never pending
together, and no single gang over both can ever be met:

- one flat ``minMember`` over every pod set waits for pods that do not exist yet: nothing ever starts;
- one PodGroup with a subgroup per replicatedJob and ``minSubGroup: 1`` (what kai_fn made before) deadlocks too:
  KAI asks the first unsatisfied subgroups in name order for pods, the finished initializer's subgroup stays
  unsatisfied for ever (0 of its ``minMember`` visible) so ``node`` is never asked, and an initializer that sorts
  after ``node`` never starts at all; meanwhile KAI's stale-gang eviction takes a running initializer down after
  the grace period, since ``node`` is below its ``minMember`` (``StaleJob``), again and again;
- KAI's own podgrouper makes ``minSubGroup`` = the number of replicatedJobs: it waits for a trainer that cannot
  exist before the initializers finish.

So the replicatedJobs are put in waves: a job with no ``dependsOn`` is in wave 0, any other one wave after the
latest job it depends on. The jobs of one wave start together and are one flat gang, ``minMember`` every pod of
theirs (``parallelism`` × ``replicas``, as the pods exist); each wave is a PodGroup of its own. The main wave, the
one with the trainer (the ``node`` job, else the first ``trainer`` ancestor, else the last wave), is the gang whose
binding is reported (``GangBound``), timed (the schedule timeout) and named on the TrainJob
(``pg-<name>-<uid>``); the others are ``pg-<name>-<uid>-stage-<wave>``. A flat runtime has one wave: one PodGroup,
unchanged. MPI's launcher (``dependsOn: node, Ready``) is a wave after the nodes: the nodes are ganged, and the
launcher, which JobSet creates only once they run, follows.

A wave that starts once an earlier one is ``Ready`` (every ``dependsOn`` of it ``Ready``: MPI's launcher) must not
be left to follow on its own, though: its predecessor's gang would bind and hold its GPUs while the later pods wait
for room (a half-job hold). With ``reserve`` (the KAI flavor), such a pod set joins the wave it waits for: one gang,
``minMember`` counting its pods too, whose places placeholder pods hold until JobSet makes the real pods
(:mod:`kai_fn.core.reserve`). A ``Complete`` dependency (initializers) still starts a new wave: the earlier pods are
gone, and hold nothing, by the time the later ones exist.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kai_fn.core import keys
from kai_fn.core.podsets import PodSet


@dataclass(frozen=True)
class Stage:
    wave: int
    pod_sets: tuple[PodSet, ...]
    main: bool
    reserved: tuple[PodSet, ...] = ()  # of pod_sets, those JobSet makes later: placeholders hold their places


    @property
    def names(self) -> tuple[str, ...]:
        return tuple(ps.name for ps in self.pod_sets)

    @property
    def min_member(self) -> int:
        """Every pod of the wave: KAI must see all that exist, or it binds some of them and leaves the rest."""
        return sum(ps.pods for ps in self.pod_sets)

    def podgroup_name(self, main_name: str) -> str:
        return main_name if self.main else f"{main_name}-stage-{self.wave}"


def waves(sets: Sequence[PodSet], reserve: bool = False) -> dict[str, int]:
    """The wave of each pod set: 0 without ``dependsOn``, else one after the latest it depends on; with ``reserve``,
    a set that waits only for ``Ready`` ones is in the latest of their waves. A name that is not a pod set (JobSet's
    webhook refuses it) is ignored; a cycle (refused too) cannot loop."""
    by_name = {ps.name: ps for ps in sets}
    found: dict[str, int] = {}

    def wave_of(name: str, seen: frozenset[str]) -> int:
        if name in found:
            return found[name]
        deps = [d for d in by_name[name].depends_on if d in by_name and d not in seen]
        step = 0 if reserve and by_name[name].after_ready and deps else 1
        found[name] = step + max((wave_of(d, seen | {name}) for d in deps), default=-1)
        return found[name]

    return {ps.name: wave_of(ps.name, frozenset()) for ps in sets}


def stages(sets: Sequence[PodSet], reserve: bool = False) -> tuple[Stage, ...]:
    """The waves in start order, one Stage each; exactly one of them is main. ``reserve``: see the module."""
    if not sets:
        return ()
    wave = waves(sets, reserve)
    names = {ps.name for ps in sets}
    later = {ps.name for ps in sets if reserve and ps.after_ready and names.intersection(ps.depends_on)}
    numbers = sorted(set(wave.values()))
    main_wave = _main_wave(sets, wave)
    return tuple(Stage(n, tuple(ps for ps in sets if wave[ps.name] == n), n == main_wave,
                       tuple(ps for ps in sets if wave[ps.name] == n and ps.name in later)) for n in numbers)


def _main_wave(sets: Sequence[PodSet], wave: dict[str, int]) -> int:
    for pick in (lambda ps: ps.name == keys.NODE, lambda ps: ps.ancestor == keys.ANCESTOR_TRAINER):
        if found := [ps for ps in sets if pick(ps)]:
            return wave[found[0].name]
    return max(wave.values())


def main_stage(all_stages: Sequence[Stage]) -> Stage:
    return next(s for s in all_stages if s.main)


def is_stage_of(podgroup_name: str, main_name: str) -> bool:
    """Whether a PodGroup is one of the other waves of the gang named ``main_name`` (see :meth:`Stage.podgroup_name`)."""
    return podgroup_name.startswith(f"{main_name}-stage-")
