import unittest

from mailq import Message, Outbox, render


class MessageTest(unittest.TestCase):
    def test_add_recipient_normalises_and_dedupes(self):
        m = Message("hi", recipients=["ana@example.org"])
        m.add_recipient("ANA@example.org").add_recipient("bo@example.org")
        self.assertEqual(m.recipients, ["ana@example.org", "bo@example.org"])

    def test_bad_address(self):
        with self.assertRaises(ValueError):
            Message("hi").add_recipient("not-an-address")

    def test_bad_address_in_constructor(self):
        with self.assertRaises(ValueError):
            Message("hi", recipients=["ana@example.org", "nope"])

    def test_header_must_be_single_line(self):
        with self.assertRaises(ValueError):
            Message("hi").set_header("X-Tag", "a\nBcc: evil@example.org")

    def test_default_messages_are_independent(self):
        first, second = Message("one"), Message("two")
        first.add_recipient("ana@example.org")
        first.set_header("X-Tag", "one")
        self.assertEqual(second.recipients, [])
        self.assertEqual(second.headers, {})
        self.assertEqual(Message("three").recipients, [])

    def test_caller_list_is_not_modified(self):
        team = ["ana@example.org"]
        m = Message("hi", recipients=team)
        m.add_recipient("bo@example.org")
        self.assertEqual(team, ["ana@example.org"])
        self.assertEqual(m.recipients, ["ana@example.org", "bo@example.org"])

    def test_caller_headers_are_not_modified(self):
        common = {"X-Team": "infra"}
        m = Message("hi", headers=common)
        m.set_header("x-ticket", "42")
        self.assertEqual(common, {"X-Team": "infra"})
        self.assertEqual(m.headers, {"X-Team": "infra", "X-Ticket": "42"})


class OutboxTest(unittest.TestCase):
    def test_compose_and_render(self):
        box = Outbox("ops@example.org")
        m = box.compose("Deploy", "done", to=["dev@example.org"])
        self.assertIn("To: dev@example.org", render(m))
        self.assertIn("From: ops@example.org", render(m))

    def test_drain_empties_queue(self):
        box = Outbox("ops@example.org")
        box.compose("a")
        self.assertEqual(len(box.drain()), 1)
        self.assertEqual(box.queue, [])

    def test_composed_messages_do_not_share_recipients(self):
        box = Outbox("ops@example.org")
        a = box.compose("A", to=["ana@example.org"])
        b = box.compose("B", to=["bo@example.org"])
        self.assertEqual(a.recipients, ["ana@example.org"])
        self.assertEqual(b.recipients, ["bo@example.org"])
        self.assertEqual(box.pending_for("bo@example.org"), [b])

    def test_rendered_messages_are_independent(self):
        box = Outbox("ops@example.org")
        box.compose("A", "a", to=["ana@example.org"]).set_header("X-Priority", "1")
        b = box.compose("B", "b", to=["bo@example.org"])
        self.assertEqual(render(b), "From: ops@example.org\nTo: bo@example.org\nSubject: B\n\nb")

    def test_two_outboxes(self):
        a = Outbox("a@example.org").compose("A")
        b = Outbox("b@example.org").compose("B")
        self.assertEqual(a.headers, {"From": "a@example.org"})
        self.assertEqual(b.headers, {"From": "b@example.org"})


if __name__ == "__main__":
    unittest.main()
