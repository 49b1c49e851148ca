from .cache import MISSING, TTLStore, memoize
from .rates import PROVIDER, RateProvider, convert, fee, reset

__all__ = ["MISSING", "PROVIDER", "RateProvider", "TTLStore", "convert", "fee", "memoize", "reset"]
