"""Session history: the earlier turns a turn of a session sends the LLM.

A session is an id the client chose (the ``session`` field of an input); it
belongs to no connection. Its history is the list of its completed turns, each
kept as the entries that turn added to the conversation (``refkernel.convo``,
in no API's shape: each request renders them in its dialect's): its user
input, every step's assistant reply with its calls and their results, its
final assistant text. Bounded both ways: at most ``turns`` turns per session (the oldest
dropped, whole), at most ``capacity`` sessions (the least recently used one
forgotten, counted in ``evictions``). Pure data: no I/O, no clock.
"""

from __future__ import annotations

import collections
import itertools
from typing import Any, Hashable, Sequence

Message = Any  # a convo.Entry; this module never looks inside one


class Sessions:
    def __init__(self, turns: int, capacity: int) -> None:
        self.turns = turns
        self.capacity = capacity
        self.evictions = 0
        # least recently used first; a turn is a tuple so that nothing appends to it later
        self._held: collections.OrderedDict[Hashable, collections.deque[tuple[Message, ...]]] = collections.OrderedDict()

    def history(self, key: Hashable) -> list[Message]:
        """Every message of the session's completed turns, oldest first (a use of it)."""
        turns = self._held.get(key)
        if turns is None:
            return []
        self._held.move_to_end(key)
        return list(itertools.chain.from_iterable(turns))

    def record(self, key: Hashable, turn: Sequence[Message], last_only: bool = False) -> None:
        """Append a completed turn; a session seen for the first time is
        created, evicting the least recently used one past ``capacity``.
        ``last_only`` is the ``drop-history`` fault: earlier turns are forgotten."""
        turns = self._held.get(key)
        if turns is None:
            turns = self._held[key] = collections.deque(maxlen=self.turns)
            while len(self._held) > self.capacity:  # the new one is last: never itself evicted
                self._held.popitem(last=False)
                self.evictions += 1
        else:
            self._held.move_to_end(key)
        if last_only:
            turns.clear()
        turns.append(tuple(turn))

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, key: object) -> bool:
        return key in self._held
