"""Key-value stores: the Store API and its implementations (torch.distributed's names)."""

from .base import Store
from .file_store import FileStore
from .hash_store import HashStore
from .prefix_store import PrefixStore
from .tcp_store import TCPStore

__all__ = ["FileStore", "HashStore", "PrefixStore", "Store", "TCPStore"]
