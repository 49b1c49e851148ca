def render(message):
    """The message as RFC 5322-style text (headers, blank line, body)."""
    lines = [f"{name}: {value}" for name, value in sorted(message.headers.items())]
    lines.append("To: " + ", ".join(message.recipients))
    lines.append("Subject: " + message.subject)
    return "\n".join(lines) + "\n\n" + message.body
