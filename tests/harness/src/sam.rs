//! The SAM translator (PyPI `aws-sam-translator`, pinned), installed into a virtualenv under the
//! target directory on first use like the emulator, and run offline by `sam_translate.py` next
//! to this crate: tests read the CloudFormation AWS would deploy from `template.yaml`, with every
//! resource SAM generates implicitly, instead of the YAML.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::{HarnessError, Result, workspace_root};

/// The translator version the tests pin (the library behind SAM CLI's transform).
pub const SAM_TRANSLATOR_VERSION: &str = "1.115.0";
/// The YAML parser the translator's `yaml_parse` needs (not one of its own dependencies).
const PYYAML_VERSION: &str = "6.0.4";

fn tools_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
        .join("tocsin-sam")
}

/// Installs the translator once per machine and returns the virtualenv's Python (blocking).
pub fn ensure_installed() -> Result<PathBuf> {
    crate::python::ensure_venv(
        &tools_dir(),
        &format!("venv-sam-translator-{SAM_TRANSLATOR_VERSION}"),
        &[format!("aws-sam-translator=={SAM_TRANSLATOR_VERSION}"), format!("PyYAML=={PYYAML_VERSION}")],
    )
}

/// Translates `template` with parameter overrides (the rest take their defaults), for region
/// `us-east-1`. Blocking: call it from `spawn_blocking` in async code. The result is cached under
/// the target directory by the template's content, the parameters and the translator's version
/// (every emulator start needs the translated roles; the translator takes seconds).
pub fn translate(template: &Path, parameters: &[(&str, &str)]) -> Result<Value> {
    let text = std::fs::read(template)?;
    let cache = tools_dir().join("translated").join(format!(
        "{:016x}.json",
        fnv1a(&[SAM_TRANSLATOR_VERSION.as_bytes(), &text, format!("{parameters:?}").as_bytes()])
    ));
    if let Some(v) = std::fs::read(&cache).ok().and_then(|b| serde_json::from_slice(&b).ok()) {
        return Ok(v);
    }
    let v = translate_uncached(template, parameters)?;
    if let Some(dir) = cache.parent() {
        std::fs::create_dir_all(dir)?;
        // Written aside and renamed: a parallel test binary never reads half a file.
        let tmp = cache.with_extension(format!("{}.tmp", std::process::id()));
        std::fs::write(&tmp, v.to_string())?;
        std::fs::rename(&tmp, &cache)?;
    }
    Ok(v)
}

/// FNV-1a: a stable cache key (the same across runs and toolchains).
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in *p {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn translate_uncached(template: &Path, parameters: &[(&str, &str)]) -> Result<Value> {
    let python = ensure_installed()?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("sam_translate.py");
    let params: serde_json::Map<String, Value> =
        parameters.iter().map(|(k, v)| ((*k).to_owned(), Value::String((*v).to_owned()))).collect();
    let out = Command::new(&python)
        .arg(&script)
        .arg(template)
        .arg(Value::Object(params).to_string())
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .output()
        .map_err(|e| HarnessError::Python(format!("cannot run {}: {e}", python.display())))?;
    if !out.status.success() {
        return Err(HarnessError::Template(format!(
            "the SAM translator refused {}: {}",
            template.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| HarnessError::Template(format!("translator output: {e}")))
}

/// `template.yaml` translated, with parameter overrides.
pub fn translate_template_yaml(parameters: &[(&str, &str)]) -> Result<Value> {
    translate(&workspace_root().join("template.yaml"), parameters)
}
