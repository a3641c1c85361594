"""Three ORSet replicas against a sequential add-wins model (hypothesis stateful testing).

The model is the unoptimized OR-Set of Shapiro et al. 2011: every add makes a unique tag,
every replica knows some tags and has removed some; an element is present at a replica
iff it knows a tag of that element that it has not removed. The dot-store ORSet with
full-state syncs must agree with it at every step, and after a full sync all replicas
must be equal, byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from crdt import ORSet, decode

ACTORS = ("us-east-1:1", "eu-west-1:1", "ap-south-1:1")
replicas = st.integers(0, len(ACTORS) - 1)
elements = st.sampled_from(["a", "b", 7, b"a"])


@dataclass
class ModelReplica:
    known: set[tuple[object, int]] = field(default_factory=set)  # (element, tag)
    removed: set[tuple[object, int]] = field(default_factory=set)

    def live(self) -> set[tuple[object, int]]:
        return self.known - self.removed

    def value(self) -> frozenset[object]:
        return frozenset(e for e, _ in self.live())


class ORSetReplicas(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.states = [ORSet.empty() for _ in ACTORS]
        self.model = [ModelReplica() for _ in ACTORS]
        self.next_tag = 0

    @rule(r=replicas, element=elements)
    def add(self, r: int, element: object) -> None:
        self.states[r] = self.states[r].merge(self.states[r].add(element, actor=ACTORS[r]))
        m = self.model[r]
        # an add also supersedes the tags of the element it has seen (Almeida et al. 2018)
        m.removed |= {t for t in m.live() if t[0] == element}
        m.known.add((element, self.next_tag))
        self.next_tag += 1

    @rule(r=replicas, element=elements)
    def remove(self, r: int, element: object) -> None:
        self.states[r] = self.states[r].merge(self.states[r].remove(element))
        m = self.model[r]
        m.removed |= {t for t in m.live() if t[0] == element}

    @rule(src=replicas, dst=replicas)
    def sync(self, src: int, dst: int) -> None:
        # ship the full state through the codec, as a snapshot would travel
        self.states[dst] = self.states[dst].merge(decode(self.states[src].to_bytes()))
        self.model[dst].known |= self.model[src].known
        self.model[dst].removed |= self.model[src].removed

    @rule()
    def full_sync(self) -> None:
        everything = ORSet.empty()
        for state in self.states:
            everything = everything.merge(state)
        self.states = [state.merge(everything) for state in self.states]
        known = set().union(*(m.known for m in self.model))
        removed = set().union(*(m.removed for m in self.model))
        self.model = [ModelReplica(set(known), set(removed)) for _ in ACTORS]
        first = self.states[0]
        assert all(s == first and s.to_bytes() == first.to_bytes() for s in self.states)

    @invariant()
    def replicas_match_the_add_wins_model(self) -> None:
        for state, model in zip(self.states, self.model, strict=True):
            assert state.value() == model.value()
            assert len(state) == len(model.value())


ORSetReplicas.TestCase.settings = settings(
    settings.get_profile("crdt"), max_examples=100, stateful_step_count=30
)
TestORSetReplicas = ORSetReplicas.TestCase
