_TRUE = {"true", "yes", "on"}
_FALSE = {"false", "no", "off"}
_NONE = {"none", "null"}


def parse_value(text):
    """Typed value of one setting (see the README for the accepted forms)."""
    text = text.strip()
    lowered = text.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    if lowered in _NONE:
        return None
    try:
        # No builtins are reachable from here, so only literal values can come out.
        return eval(text, {"__builtins__": {}}, {})
    except Exception:
        return text
