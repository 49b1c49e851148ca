import functools
import time

MISSING = object()


class TTLStore:
    """A dict whose entries expire ``ttl_s`` seconds after they were stored."""

    def __init__(self, ttl_s=60.0, clock=time.monotonic):
        self.ttl_s = ttl_s
        self.clock = clock
        self.hits = 0
        self.misses = 0
        self._data = {}

    def get(self, key):
        entry = self._data.get(key)
        if entry is not None and self.clock() < entry[1]:
            self.hits += 1
            return entry[0]
        self._data.pop(key, None)
        self.misses += 1
        return MISSING

    def set(self, key, value):
        self._data[key] = (value, self.clock() + self.ttl_s)

    def clear(self):
        self._data.clear()
        self.hits = self.misses = 0

    def __len__(self):
        return len(self._data)


def make_key(func, args, kwargs):
    """The cache key of one call."""
    return args


def memoize(store):
    """Cache the decorated function's results in ``store``."""

    def decorate(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            key = make_key(func, args, kwargs)
            value = store.get(key)
            if value is MISSING:
                value = func(*args, **kwargs)
                store.set(key, value)
            return value

        wrapper.store = store
        return wrapper

    return decorate
