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


class OutboxTest(unittest.TestCase):
    def test_compose_and_render(self):
        box = Outbox("ops@example.org")
        m = box.compose("Deploy", "done", to=["dev@example.org"])
        self.assertIn("To: dev@example.org", render(m))
        self.assertIn("From: ops@example.org", render(m))


if __name__ == "__main__":
    unittest.main()
