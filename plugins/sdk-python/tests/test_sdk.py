"""The Python SDK's own tests, in a plain Python (no component):
``python3 -m unittest discover -s plugins/sdk-python/tests`` (scripts/test.sh runs it)."""

import sys
import types
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sluice_plugin import Config, Record  # noqa: E402
from sluice_plugin._core import MAX_ERROR_BYTES, Plugin, error_text, outputs  # noqa: E402


def module(**functions):
    m = types.ModuleType("plugin")
    for name, f in functions.items():
        setattr(m, name, f)
    return m


class RecordTest(unittest.TestCase):
    def test_values_take_bytes_text_none_or_json(self):
        self.assertEqual(Record(b"\xff").value, b"\xff")
        self.assertEqual(Record("é").value, "é".encode())
        self.assertIsNone(Record(None).value)
        self.assertEqual(Record({"a": [1, "é"]}).value, '{"a":[1,"é"]}'.encode())
        with self.assertRaisesRegex(TypeError, "record value must be"):
            Record(object())

    def test_reading_says_what_is_wrong(self):
        self.assertEqual(Record('{"n": 1}').json(), {"n": 1})
        with self.assertRaisesRegex(ValueError, "not UTF-8"):
            _ = Record(b"\xff").text
        with self.assertRaisesRegex(ValueError, "is not JSON"):
            Record("nope").json()
        self.assertIsNone(Record(None).json())

    def test_outputs_keep_the_metadata_and_copy_headers(self):
        r = Record("v", key="k", headers=[("h", "1")], timestamp=5, topic="t", offset=9)
        out = r.with_header("h2", None).with_value(b"w")
        self.assertEqual((out.topic, out.offset, out.timestamp, out.key), ("t", 9, 5, b"k"))
        self.assertEqual(out.headers, [("h", b"1"), ("h2", None)])
        self.assertEqual(r.headers, [("h", b"1")], "the input is unchanged")
        self.assertEqual(out.header("h"), b"1")


class CoreTest(unittest.TestCase):
    def test_what_transform_answers(self):
        r = Record("x")
        self.assertEqual(outputs(None), [])
        self.assertEqual(outputs(r), [r])
        self.assertEqual(outputs((r, r)), [r, r])
        with self.assertRaisesRegex(TypeError, "returned a str"):
            outputs("x")
        with self.assertRaisesRegex(TypeError, "item 1 is a int"):
            outputs([r, 3])

    def test_an_exception_becomes_the_records_error_with_its_line(self):
        def transform(record):
            raise KeyError("uid")

        answer = Plugin(module(transform=transform), "test_sdk.py").transform(Record("x"))
        self.assertIsInstance(answer, str)
        self.assertRegex(answer, r"^KeyError: 'uid' \(test_sdk\.py, line \d+\)$")

    def test_a_wrong_answer_is_the_records_error(self):
        answer = Plugin(module(transform=lambda r: 42)).transform(Record("x"))
        self.assertTrue(answer.startswith("TypeError: transform returned a int"), answer)

    def test_a_huge_message_is_cut_to_the_hosts_limit(self):
        try:
            raise ValueError("é" * 10_000)
        except ValueError as e:
            text = error_text(e)
        self.assertLessEqual(len(text.encode()), MAX_ERROR_BYTES)
        self.assertRegex(text, r"\.\.\. \(test_sdk\.py, line \d+\)$", "the line is kept")

    def test_what_escapes_a_plugin_is_still_the_records_error(self):
        import sys as system

        def exits(record):
            system.exit("bad")

        def surrogate(record):
            raise ValueError(b"\xff".decode("utf-8", "surrogateescape"))

        for f, expected in [(exits, "SystemExit: bad"), (surrogate, "ValueError: ?")]:
            answer = Plugin(module(transform=f), "test_sdk.py").transform(Record("x"))
            self.assertTrue(answer.startswith(expected), answer)
        bad_output = Plugin(module(transform=lambda r: r)).transform(
            Record("x"), lambda r: 1 / 0
        )
        self.assertTrue(bad_output.startswith("ZeroDivisionError"), bad_output)
        with self.assertRaisesRegex(TypeError, "must be bytes"):
            Record({"v": float("nan")})

    def test_headers_may_be_a_dict(self):
        self.assertEqual(Record(headers={"ab": "1"}).headers, [("ab", b"1")])

    def test_init_rejects_its_configuration(self):
        def init(config):
            config.deny_unknown(["a"])

        plugin = Plugin(module(init=init, transform=lambda r: r))
        self.assertIsNone(plugin.init([("a", "1")]))
        self.assertIn("unknown config key(s) b", plugin.init([("a", "1"), ("b", "2")]))
        self.assertIsNone(Plugin(module(transform=lambda r: r)).init([("any", "x")]))

    def test_a_module_without_transform_is_refused(self):
        with self.assertRaisesRegex(TypeError, "must define `def transform"):
            Plugin(module(init=lambda c: None))

    def test_config_require_names_the_key(self):
        with self.assertRaisesRegex(ValueError, "config `salt` is required"):
            Config([]).require("salt")


if __name__ == "__main__":
    unittest.main()
