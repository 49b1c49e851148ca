from .message import Message


class Outbox:
    """Messages waiting to be sent, in the order they were queued."""

    def __init__(self, sender):
        self.sender = sender
        self.queue = []

    def compose(self, subject, body="", to=None):
        message = Message(subject, body)
        message.set_header("From", self.sender)
        for address in to or ():
            message.add_recipient(address)
        self.queue.append(message)
        return message

    def pending_for(self, address):
        address = address.lower()
        return [m for m in self.queue if address in m.recipients]

    def drain(self):
        sent, self.queue = self.queue, []
        return sent
