"""Collective algorithms as plain functions over ``Peers`` (messages) or ``Slots`` (shared
memory), and their registry."""

from .algorithm import COLLECTIVE_NAMES, COLLECTIVES, Algorithm
from .peers import Peers
from .registry import ALGORITHMS, choose
from .slots import Slots

__all__ = ["ALGORITHMS", "COLLECTIVES", "COLLECTIVE_NAMES", "Algorithm", "Peers", "Slots", "choose"]
