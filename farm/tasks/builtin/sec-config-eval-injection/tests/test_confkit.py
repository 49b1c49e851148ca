import os
import tempfile
import unittest

from confkit import load, loads, parse_value

ESCAPE = ("[c for c in ().__class__.__base__.__subclasses__() if c.__name__ == 'catch_warnings'][0]()"
          "._module.__builtins__['__import__']('os').system('touch {marker}')")


class ValuesTest(unittest.TestCase):
    def test_numbers(self):
        self.assertEqual(parse_value("8080"), 8080)
        self.assertEqual(parse_value("-3"), -3)
        self.assertEqual(parse_value("2.5"), 2.5)
        self.assertEqual(parse_value("0x1F"), 31)
        self.assertEqual(parse_value("1_000"), 1000)

    def test_containers(self):
        self.assertEqual(parse_value('["a", "b"]'), ["a", "b"])
        self.assertEqual(parse_value("{'w': 1, 'h': [2, 3]}"), {"w": 1, "h": [2, 3]})
        self.assertEqual(parse_value("(1, 'x')"), (1, "x"))

    def test_words(self):
        self.assertIs(parse_value("off"), False)
        self.assertIs(parse_value("Yes"), True)
        self.assertIsNone(parse_value("null"))
        self.assertEqual(parse_value("Welcome!"), "Welcome!")
        self.assertEqual(parse_value("'quoted # text'"), "quoted # text")

    def test_plain_call_is_text(self):
        self.assertEqual(parse_value("__import__('os').getcwd()"), "__import__('os').getcwd()")

    def test_poc_attribute_walk_is_text(self):
        value = parse_value("().__class__.__base__.__subclasses__()")
        self.assertEqual(value, "().__class__.__base__.__subclasses__()")

    def test_poc_sandbox_escape(self):
        with tempfile.TemporaryDirectory() as tmp:
            marker = os.path.join(tmp, "PWNED")
            payload = ESCAPE.format(marker=marker)
            self.assertEqual(parse_value(payload), payload)
            self.assertFalse(os.path.exists(marker), "the payload ran")

    def test_poc_sandbox_escape_via_environment(self):
        with tempfile.TemporaryDirectory() as tmp:
            marker = os.path.join(tmp, "PWNED")
            env = {"CONFKIT_SERVER_BANNER": ESCAPE.format(marker=marker)}
            settings = loads("[server]\nbanner = hi\n", env)
            self.assertFalse(os.path.exists(marker), "the payload ran")
            self.assertIsInstance(settings["server"]["banner"], str)

    def test_poc_lambda_is_text(self):
        self.assertEqual(parse_value("(lambda: 1)"), "(lambda: 1)")


class LoaderTest(unittest.TestCase):
    def test_sections_and_env(self):
        settings = loads("[server]\nport = 80\n", {"CONFKIT_SERVER_PORT": "8080"})
        self.assertEqual(settings, {"server": {"port": 8080}})

    def test_comments(self):
        settings = loads("# top\n[db]\nurl = 'sqlite:///x.db'  # comment\nretries = 3\n", {})
        self.assertEqual(settings, {"db": {"url": "sqlite:///x.db", "retries": 3}})

    def test_errors(self):
        with self.assertRaisesRegex(ValueError, "line 1"):
            loads("port = 1\n", {})

    def test_load_file(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "app.conf")
            with open(path, "w") as fh:
                fh.write("[app]\nname = demo\nworkers = 4\n")
            self.assertEqual(load(path, {}), {"app": {"name": "demo", "workers": 4}})


if __name__ == "__main__":
    unittest.main()
