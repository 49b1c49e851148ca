import unittest

from confkit import loads, parse_value


class ConfkitTest(unittest.TestCase):
    def test_values(self):
        self.assertEqual(parse_value("8080"), 8080)
        self.assertEqual(parse_value('["a", "b"]'), ["a", "b"])
        self.assertIs(parse_value("off"), False)
        self.assertEqual(parse_value("Welcome!"), "Welcome!")

    def test_sections_and_env(self):
        settings = loads("[server]\nport = 80\n", {"CONFKIT_SERVER_PORT": "8080"})
        self.assertEqual(settings, {"server": {"port": 8080}})


if __name__ == "__main__":
    unittest.main()
