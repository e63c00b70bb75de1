//! The published API documents are what they claim to be, checked by real validators (installed
//! from PyPI at pinned versions into a virtualenv under the target directory, like the emulator):
//! `functions/intake/api/openapi.yaml` is valid OpenAPI 3.0 and its request examples satisfy its
//! own `AlertRequest` schema; `alert-requested.schema.json` is a valid JSON Schema (2020-12) and
//! its examples — and the OpenAPI request examples, the same document — satisfy it. A request
//! with a bad recipient is rejected by both, so the checks can fail.

use std::path::PathBuf;
use std::process::Command;

const VALIDATORS: &[&str] = &["openapi-spec-validator==0.7.2", "jsonschema==4.23.0"];

fn validators_python() -> PathBuf {
    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| tocsin_harness::workspace_root().join("target"))
        .join("tocsin-api-validators");
    tocsin_harness::python::ensure_venv(&dir, "venv-openapi-spec-validator-0.7.2-jsonschema-4.23.0", VALIDATORS)
        .unwrap_or_else(|e| panic!("installing the validators: {e}"))
}

/// Runs `script` with the API folder as its argument; panics with its output unless it succeeds.
fn run(script: &str) -> String {
    let api = tocsin_harness::workspace_root().join("functions/intake/api");
    let out = Command::new(validators_python()).arg("-c").arg(script).arg(&api).output().expect("python");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    stdout.into_owned()
}

#[test]
fn the_openapi_document_is_valid_openapi_and_its_examples_satisfy_its_request_schema() {
    let out = run(r#"
import sys, copy
from openapi_spec_validator import validate
from openapi_spec_validator.readers import read_from_filename
from openapi_schema_validator import OAS30Validator
spec, _ = read_from_filename(sys.argv[1] + "/openapi.yaml")
validate(spec)
schema = spec["components"]["schemas"]["AlertRequest"]
examples = spec["paths"]["/alerts"]["post"]["requestBody"]["content"]["application/json"]["examples"]
for name, ex in examples.items():
    OAS30Validator(schema).validate(ex["value"])
bad = copy.deepcopy(next(iter(examples.values()))["value"])
bad["recipient"] = "0044 7911"
assert not OAS30Validator(schema).is_valid(bad), "a bad recipient passes the request schema"
print(f"valid; {len(examples)} examples")
"#);
    assert!(out.contains("valid; 4 examples"), "{out}");
}

#[test]
fn the_eventbridge_schema_is_valid_json_schema_and_its_examples_and_the_http_examples_satisfy_it() {
    let out = run(r#"
import sys, json, copy, yaml
from jsonschema import Draft202012Validator
schema = json.load(open(sys.argv[1] + "/alert-requested.schema.json"))
Draft202012Validator.check_schema(schema)
v = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
for ex in schema["examples"]:
    v.validate(ex)
spec = yaml.safe_load(open(sys.argv[1] + "/openapi.yaml"))
http = spec["paths"]["/alerts"]["post"]["requestBody"]["content"]["application/json"]["examples"]
for name, ex in http.items():
    v.validate(ex["value"])
bad = copy.deepcopy(schema["examples"][0])
bad["recipient"] = "0044 7911"
assert not v.is_valid(bad), "a bad recipient passes the schema"
print(f"valid; {len(schema['examples'])} + {len(http)} examples")
"#);
    assert!(out.starts_with("valid;"), "{out}");
}
