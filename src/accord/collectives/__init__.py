"""Collective algorithms as plain functions over ``Peers``, and their registry."""

from .peers import Peers
from .registry import ALGORITHMS, COLLECTIVE_NAMES, COLLECTIVES, Algorithm, choose

__all__ = ["ALGORITHMS", "COLLECTIVES", "COLLECTIVE_NAMES", "Algorithm", "Peers", "choose"]
