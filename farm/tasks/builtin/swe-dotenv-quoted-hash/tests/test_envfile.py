import os
import tempfile
import unittest

from envfile import ParseError, load, loads, parse_lines


class LoadsTest(unittest.TestCase):
    def test_basic(self):
        self.assertEqual(loads("A=1\nexport B = two\n# comment\n", {}), {"A": "1", "B": "two"})

    def test_inline_comment(self):
        self.assertEqual(loads("A=1 # one\n", {}), {"A": "1"})

    def test_quotes(self):
        self.assertEqual(loads("A='x y'\nB=\"a\\tb\"\n", {}), {"A": "x y", "B": "a\tb"})

    def test_bad_key(self):
        with self.assertRaises(ParseError):
            loads("1A=x\n", {})

    def test_hash_without_space_is_kept(self):
        self.assertEqual(loads("URL=http://host/#top\n", {}), {"URL": "http://host/#top"})

    def test_equals_in_value(self):
        self.assertEqual(loads("DB=postgres://a@b/c?ssl=1&x=2\n", {}), {"DB": "postgres://a@b/c?ssl=1&x=2"})

    def test_empty_values(self):
        self.assertEqual(loads("A=\nB=''\nC=\"\"\n", {}), {"A": "", "B": "", "C": ""})

    def test_interpolation(self):
        env = {"USER": "ana"}
        text = "HOME_DIR=/home/${USER}\nCACHE=\"${HOME_DIR}/.cache\"\nLIT='${USER}'\nD=${MISSING:-dflt}\n"
        self.assertEqual(loads(text, env), {"HOME_DIR": "/home/ana", "CACHE": "/home/ana/.cache",
                                            "LIT": "${USER}", "D": "dflt"})

    def test_escaped_dollar(self):
        self.assertEqual(loads('PRICE="\\${AMOUNT} USD"\n', {"AMOUNT": "5"}), {"PRICE": "${AMOUNT} USD"})

    def test_unterminated_quote_reports_line(self):
        with self.assertRaises(ParseError) as ctx:
            loads("A=1\nB=\"open\n", {})
        self.assertEqual(ctx.exception.lineno, 2)

    def test_text_after_closing_quote_is_an_error(self):
        with self.assertRaises(ParseError):
            loads("A=\"x\" y\n", {})

    def test_load_does_not_override_by_default(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, ".env")
            with open(path, "w") as fh:
                fh.write("A=file\nB=file\n")
            env = {"A": "process"}
            load(path, env)
            self.assertEqual(env, {"A": "process", "B": "file"})
            load(path, env, override=True)
            self.assertEqual(env["A"], "file")

    # --- '#' inside quoted values ---

    def test_hash_inside_double_quotes(self):
        self.assertEqual(loads('PASSWORD="s3cr3t #1"\n', {}), {"PASSWORD": "s3cr3t #1"})

    def test_hash_inside_single_quotes(self):
        self.assertEqual(loads("COLOR='  # fff'\n", {}), {"COLOR": "  # fff"})

    def test_quoted_hash_then_comment(self):
        text = 'TITLE="Issue #12 # not a comment" # a comment\nNEXT=1\n'
        self.assertEqual(loads(text, {}), {"TITLE": "Issue #12 # not a comment", "NEXT": "1"})

    def test_escaped_quote_and_hash(self):
        self.assertEqual(loads('MSG="say \\"hi\\" #now"  # trailing\n', {}), {"MSG": 'say "hi" #now'})

    def test_single_quotes_then_comment(self):
        entries = parse_lines("export K='a # b'   # c\n")
        self.assertEqual([(e.key, e.value, e.quote) for e in entries], [("K", "a # b", "'")])

    def test_interpolation_inside_quotes_with_hash(self):
        self.assertEqual(loads('TAG="${NAME} #${N}"\n', {"NAME": "build", "N": "7"}), {"TAG": "build #7"})


if __name__ == "__main__":
    unittest.main()
