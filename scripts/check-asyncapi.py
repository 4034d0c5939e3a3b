"""Runs JSON documents through the JSON Schemas of docs/schemas/ (scripts/check-asyncapi.sh) with
ECMA-262 regular expressions, as JSON Schema specifies them: `pattern` is evaluated by `regress`
(an ECMA-262 engine, with the `u` flag), and every document is judged again with `regress`
without the `u` flag and with Python's `re`; a document the engines judge differently fails the
run (a pattern ending in `$`, which Python's and Java's engines match before a final LF, alone
would be such a schema).

    python check-asyncapi.py SCHEMA_DIR CORPUS_DIR
        every `<kind>/valid-*.json` of the corpus must validate against `<kind>.schema.json`
        and every `<kind>/invalid-<field>--<rule>.json` must not; nor must a
        `schema-stricter-<field>--<why>.json`, which the worker accepts: a UTF-8 byte limit
        JSON Schema can only approximate from below (it counts characters). A
        `beyond-schema-<field>--<rule>.json` breaks a rule JSON Schema cannot say (a key twice in
        one object, which the parsed document no longer shows; nesting depth; the reader's clock):
        it must validate, and the parsers must refuse it. The worker's and the client's parsers
        read the same corpus in ContractCorpusTests (swift test): schema and parser cannot drift
        apart. Formats are asserted (`date-time` by check-jsonschema's own RFC 3339 check: the
        jsonschema library alone skips it unless an optional package is installed).
    python check-asyncapi.py SCHEMA_DIR --captured DIR
        every `<kind>/*.json` under DIR, messages the worker itself wrote during the tests
        (APNS_TEST_CAPTURE_DIR), must validate; every kind named in --expect-kinds must be there.
"""
import json
import os
import re
import sys

import jsonschema
import regress
from check_jsonschema.formats.implementations import validate_rfc3339
from jsonschema import ValidationError

# The draft's format checker asserts `date-time` only when rfc3339-validator is installed, and
# passes every string otherwise: check-jsonschema's own implementation is asserted instead.
FORMAT_CHECKER = jsonschema.FormatChecker(formats=())
FORMAT_CHECKER.checkers.update(jsonschema.Draft202012Validator.FORMAT_CHECKER.checkers)
FORMAT_CHECKER.checks("date-time")(validate_rfc3339)

ENGINES = {
    "ECMA-262 (u flag)": lambda pattern: regress.Regex(pattern, "u").find,
    "ECMA-262": lambda pattern: regress.Regex(pattern).find,
    "Python re": lambda pattern: re.compile(pattern).search,
}
# (kind/name, {engine: valid}) for every document the engines judged differently.
engine_disagreements = []


def _pattern_keyword(compile):
    cache = {}

    def pattern(validator, pattern, instance, schema):
        if not validator.is_type(instance, "string"):
            return
        if pattern not in cache:
            cache[pattern] = compile(pattern)
        if cache[pattern](instance) is None:
            yield ValidationError(f"{instance!r} does not match {pattern!r}")

    return pattern


VALIDATORS = {
    name: jsonschema.validators.extend(jsonschema.Draft202012Validator, {"pattern": _pattern_keyword(compile)})
    for name, compile in ENGINES.items()
}


class Judge:
    """One schema, its verdict under ECMA-262 (JSON Schema's regular expressions), and a check
    that every engine gives the same verdict on the whole document."""

    def __init__(self, schemas, kind):
        with open(os.path.join(schemas, f"{kind}.schema.json")) as f:
            schema = json.load(f)
        self.validators = {
            name: cls(schema, format_checker=FORMAT_CHECKER)
            for name, cls in VALIDATORS.items()
        }

    def errors(self, document, label):
        results = {name: list(v.iter_errors(document)) for name, v in self.validators.items()}
        verdicts = {name: not errors for name, errors in results.items()}
        if len(set(verdicts.values())) > 1:
            engine_disagreements.append((label, verdicts))
        return results["ECMA-262 (u flag)"]


def load(path):
    with open(path, "rb") as f:
        return json.loads(f.read().decode("utf-8"))


def judged_documents(schemas, root):
    """Each JSON document under root/<kind>/, with its kind, its name and its schema's errors."""
    for kind in sorted(os.listdir(root)):
        folder = os.path.join(root, kind)
        if not os.path.isdir(folder):
            continue
        judge = Judge(schemas, kind)
        for name in sorted(os.listdir(folder)):
            if name.endswith(".json"):
                yield kind, name, judge.errors(load(os.path.join(folder, name)), f"{kind}/{name}")


def check_corpus(schemas, corpus):
    failures = cases = 0
    for kind, name, errors in judged_documents(schemas, corpus):
        cases += 1
        expected_valid = name.startswith(("valid-", "beyond-schema-"))
        if not expected_valid and not name.startswith(("invalid-", "schema-stricter-")):
            print(f"check-asyncapi: FAIL: {kind}/{name}: name neither valid-…, invalid-…, schema-stricter-… nor beyond-schema-…", file=sys.stderr)
            failures += 1
        elif expected_valid and errors:
            print(f"check-asyncapi: FAIL: {kind}/{name} should validate: {errors[0].json_path}: {errors[0].message}", file=sys.stderr)
            failures += 1
        elif not expected_valid and not errors:
            print(f"check-asyncapi: FAIL: {kind}/{name} should not validate against {kind}.schema.json", file=sys.stderr)
            failures += 1
    if cases < 40:
        print(f"check-asyncapi: FAIL: only {cases} examples; the corpus needs at least 40", file=sys.stderr)
        failures += 1
    return failures, cases


def check_captured(schemas, captured, expected_kinds):
    failures = cases = 0
    seen = {}
    for kind, name, errors in judged_documents(schemas, captured):
        cases += 1
        seen[kind] = seen.get(kind, 0) + 1
        if errors:
            print(f"check-asyncapi: FAIL: the worker wrote {kind}/{name}, which its schema refuses: {errors[0].json_path}: {errors[0].message}", file=sys.stderr)
            failures += 1
    print("check-asyncapi: captured: " + (", ".join(f"{n} {kind}" for kind, n in sorted(seen.items())) or "nothing"))
    for kind in sorted(set(expected_kinds) - set(seen)):
        print(f"check-asyncapi: FAIL: no captured {kind}: the tests that write it did not run or wrote nothing", file=sys.stderr)
        failures += 1
    return failures, cases


def main(argv):
    if len(argv) >= 3 and argv[1] == "--captured":
        expected = []
        if len(argv) == 5 and argv[3] == "--expect-kinds":
            expected = argv[4].split(",")
        failures, cases = check_captured(argv[0], argv[2], expected)
        what = "messages the worker wrote"
    elif len(argv) == 2:
        failures, cases = check_corpus(*argv)
        what = "examples"
    else:
        sys.exit(__doc__)
    for label, verdicts in engine_disagreements:
        print(f"check-asyncapi: FAIL: {label}: the regular expression engines disagree on it: {verdicts}", file=sys.stderr)
        failures += 1
    if failures:
        sys.exit(f"check-asyncapi: {failures} disagreement(s) between the {what} and the schemas")
    print(f"check-asyncapi: ok: {cases} {what} agree with the schemas (ECMA-262 patterns, and the same verdicts under Python's re)")


if __name__ == "__main__":
    main(sys.argv[1:])
