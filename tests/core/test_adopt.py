"""What kai_fn reads as an edit of its own PodGroup: the fields that make the gang (who, how many at once, whose
queue), never what KAI writes or what the plan took from reads a later look does not repeat."""
from __future__ import annotations

import pytest

from kai_fn.core import adopt

PLANNED = {"spec": {"minMember": 4, "queue": "team-a", "priorityClassName": "train", "stalenessGracePeriod": "-1s"}}

EDITS = {
    "as planned": ({}, []),
    "minMember edited down": ({"minMember": 1}, ["spec.minMember is 1, not 4"]),
    "another queue": ({"queue": "team-b"}, ["spec.queue is 'team-b', not 'team-a'"]),
    "subgroups added": ({"subGroups": [{"name": "a", "minMember": 1}]},
                        ["spec.subGroups is [{'name': 'a', 'minMember': 1}], not None"]),
    "KAI's markUnschedulable and schedulingBackoff": ({"markUnschedulable": True, "schedulingBackoff": 1}, []),
    "another priority (planned from PriorityClasses a later look does not read)": (
        {"priorityClassName": "inference"}, []),
}


@pytest.mark.parametrize("change, edits", EDITS.values(), ids=list(EDITS))
def test_an_edit_of_kai_fns_podgroup_is_read_in_the_fields_that_make_the_gang(change, edits):
    live = {"spec": {**PLANNED["spec"], **change}}
    assert adopt.gang_edits(live, PLANNED) == edits
