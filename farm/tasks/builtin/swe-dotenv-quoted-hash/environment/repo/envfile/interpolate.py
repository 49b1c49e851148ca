import re

_REFERENCE = re.compile(r"(\\?)\$\{([A-Za-z_][A-Za-z0-9_.]*)(?::-([^}]*))?\}")


def expand(value, known, environ):
    """Replace ${NAME} and ${NAME:-default}; earlier keys of the file win over ``environ``."""

    def substitute(match):
        escaped, name, default = match.groups()
        if escaped:
            return match.group(0)[1:]
        if name in known:
            return known[name]
        if name in environ:
            return environ[name]
        return default or ""

    return _REFERENCE.sub(substitute, value).replace("\\$", "$")
