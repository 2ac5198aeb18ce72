"""Which pods KAI can gang together: a runtime's replicatedJobs in start waves, one flat PodGroup each.

A job that ``dependsOn`` another is never pending with it (JobSet makes it once the other is ``Complete`` or
``Ready``), so no one gang over both can be met; each wave (no ``dependsOn``: wave 0; else one after the latest it
depends on) is a gang of its own, the trainer's the main one. docs/how-it-decides.md ("Layout") says why in KAI's terms.
With ``reserve`` (the KAI flavor), a job that starts once its predecessor is ``Ready`` (MPI's launcher) joins that
wave instead, its places held by placeholder pods (:mod:`kai_fn.core.reserve`, docs/reservation.md).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
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


# How deep a dependsOn chain the admission policy names (knative/components/admission-policy: eight rounds of
# relaxation); the plan refuses a deeper one.
MAX_CHAIN = 8


def waves(sets: Sequence[PodSet], reserve: bool = False) -> dict[str, int]:
    """The wave of each pod set: 0 without ``dependsOn``, else one after the latest it depends on; with ``reserve``,
    a set that waits only for ``Ready`` ones is in the latest of their waves. A name that is not a pod set (JobSet's
    webhook refuses it) or the set itself (a job that waits for itself never starts) is ignored; a cycle (refused
    too) cannot loop."""
    by_name = {ps.name: ps for ps in sets}
    found: dict[str, int] = {}

    def wave_of(name: str, seen: frozenset[str]) -> int:
        if name in found:
            return found[name]
        deps = [d for d in by_name[name].depends_on if d in by_name and d != name and d not in seen]
        step = 0 if reserve and by_name[name].after_ready and deps else 1
        found[name] = step + max((wave_of(d, seen | {name}) for d in deps), default=-1)
        return found[name]

    return {ps.name: wave_of(ps.name, frozenset()) for ps in sets}


def chain_depth(sets: Sequence[PodSet]) -> int:
    """The most ``dependsOn`` links one after another, whatever their status: 0 without any."""
    by_name = {ps.name: ps for ps in sets}
    found: dict[str, int] = {}

    def depth_of(name: str, seen: frozenset[str]) -> int:
        if name not in found:
            deps = [d for d in by_name[name].depends_on if d in by_name and d != name and d not in seen]
            found[name] = max((1 + depth_of(d, seen | {name}) for d in deps), default=0)
        return found[name]

    return max((depth_of(ps.name, frozenset()) for ps in sets), default=0)


def stages(sets: Sequence[PodSet], reserve: bool = False) -> tuple[Stage, ...]:
    """The waves in start order, one Stage each; exactly one of them is main. ``reserve``: see the module."""
    if not sets:
        return ()
    wave = waves(sets, reserve)
    names = {ps.name for ps in sets}
    later = {ps.name for ps in sets if reserve and ps.after_ready and names.intersection(ps.depends_on) - {ps.name}}
    numbers = sorted(set(wave.values()))
    main_wave = _main_wave(sets, wave)
    return tuple(Stage(n, tuple(ps for ps in sets if wave[ps.name] == n), n == main_wave,
                       tuple(ps for ps in sets if wave[ps.name] == n and ps.name in later)) for n in numbers)


def _main_wave(sets: Sequence[PodSet], wave: dict[str, int]) -> int:
    picks: tuple[Callable[[PodSet], bool], ...] = (lambda ps: ps.name == keys.NODE,
                                                   lambda ps: ps.ancestor == keys.ANCESTOR_TRAINER)
    for pick in picks:
        if found := [ps for ps in sets if pick(ps)]:
            return wave[found[0].name]
    return max(wave.values())


def main_stage(all_stages: Sequence[Stage]) -> Stage:
    return next(s for s in all_stages if s.main)


def is_stage_of(podgroup_name: str, main_name: str) -> bool:
    """Whether a PodGroup is one of the other waves of the gang named ``main_name`` (see :meth:`Stage.podgroup_name`)."""
    return podgroup_name.startswith(f"{main_name}-stage-")
