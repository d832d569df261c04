"""``python -m accord.config``: every setting, its default and the value seen now."""

from . import describe

describe()
