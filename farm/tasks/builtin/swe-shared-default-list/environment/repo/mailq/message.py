import re

_ADDRESS = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


def check_address(address):
    if not _ADDRESS.match(address):
        raise ValueError(f"not an e-mail address: {address!r}")
    return address.lower()


class Message:
    def __init__(self, subject, body="", recipients=[], headers={}):
        self.subject = subject
        self.body = body
        self.recipients = recipients
        self.headers = headers
        for address in self.recipients:
            check_address(address)

    def add_recipient(self, address):
        address = check_address(address)
        if address not in self.recipients:
            self.recipients.append(address)
        return self

    def set_header(self, name, value):
        if "\n" in value or "\r" in value:
            raise ValueError(f"header {name!r} must be a single line")
        self.headers[name.title()] = value
        return self

    def __repr__(self):
        return f"Message({self.subject!r}, to={self.recipients!r})"
