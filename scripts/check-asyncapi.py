"""Runs the corpus of docs/asyncapi-examples/ through the JSON Schemas of docs/schemas/
(scripts/check-asyncapi.sh). Every `valid-*.json` must validate against its kind's schema and
every `invalid-<field>--<rule>.json` must not; any disagreement fails. The worker's own parsers
read the same corpus in ContractCorpusTests (swift test), so schema and parser cannot drift apart.

    python check-asyncapi.py SCHEMA_DIR CORPUS_DIR
"""
import json
import os
import sys

import jsonschema

schemas, corpus = sys.argv[1:]
failures = 0
cases = 0
for kind in sorted(os.listdir(corpus)):
    folder = os.path.join(corpus, kind)
    if not os.path.isdir(folder):
        continue
    with open(os.path.join(schemas, f"{kind}.schema.json")) as f:
        schema = json.load(f)
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".json"):
            continue
        cases += 1
        with open(os.path.join(folder, name)) as f:
            document = json.load(f)
        errors = list(validator.iter_errors(document))
        expected_valid = name.startswith("valid-")
        if not expected_valid and not name.startswith("invalid-"):
            print(f"check-asyncapi: FAIL: {kind}/{name}: name neither valid-… nor invalid-…", file=sys.stderr)
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
if failures:
    sys.exit(f"check-asyncapi: {failures} disagreement(s) between the corpus and the schemas")
print(f"check-asyncapi: ok: {cases} examples agree with the schemas")
