//! Versioned, immutable message templates.
//!
//! The catalog (`shared/templates/catalog.json`) is compiled into every binary. A published
//! version never changes: `shared/templates/published.lock` pins the SHA-256 of each version's
//! body, and a test fails if a body changes or a version disappears. To change wording, publish a
//! new version.
//!
//! Placeholders are `{{name}}` with `name` of `[a-z0-9_]`; every placeholder must be given and
//! nothing else may be.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TemplateRef {
    pub name: String,
    pub version: u32,
}

impl std::fmt::Display for TemplateRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@v{}", self.name, self.version)
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct Template {
    pub name: String,
    pub version: u32,
    pub description: String,
    pub body: String,
}

#[derive(Debug, Deserialize)]
struct CatalogFile {
    templates: Vec<Template>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece<'a> {
    Text(&'a str),
    Var(&'a str),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("template body has an unclosed '{{{{' at byte {0}")]
    Unclosed(usize),
    #[error("template placeholder '{0}' is not of [a-z0-9_]")]
    BadName(String),
}

/// Splits a body into literal text and placeholders.
pub fn parse_body(body: &str) -> Result<Vec<Piece<'_>>, TemplateError> {
    let mut pieces = Vec::new();
    let mut rest = body;
    let mut offset = 0;
    while let Some(start) = rest.find("{{") {
        if start > 0 {
            pieces.push(Piece::Text(&rest[..start]));
        }
        let after = &rest[start + 2..];
        let end = after.find("}}").ok_or(TemplateError::Unclosed(offset + start))?;
        let name = after[..end].trim();
        if name.is_empty() || !name.bytes().all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_')) {
            return Err(TemplateError::BadName(name.to_owned()));
        }
        pieces.push(Piece::Var(name));
        let consumed = start + 2 + end + 2;
        offset += consumed;
        rest = &rest[consumed..];
    }
    if !rest.is_empty() {
        pieces.push(Piece::Text(rest));
    }
    Ok(pieces)
}

impl Template {
    pub fn reference(&self) -> TemplateRef {
        TemplateRef { name: self.name.clone(), version: self.version }
    }

    pub fn variables(&self) -> BTreeSet<&str> {
        parse_body(&self.body)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|p| match p {
                Piece::Var(v) => Some(v),
                Piece::Text(_) => None,
            })
            .collect()
    }

    /// Renders with exactly the template's variables; the caller checked the variable set.
    pub fn render(&self, vars: &BTreeMap<String, String>) -> String {
        let mut out = String::with_capacity(self.body.len() + 64);
        for piece in parse_body(&self.body).unwrap_or_default() {
            match piece {
                Piece::Text(t) => out.push_str(t),
                Piece::Var(v) => out.push_str(vars.get(v).map(String::as_str).unwrap_or_default()),
            }
        }
        out
    }
}

/// The compiled-in catalog.
#[derive(Debug)]
pub struct Catalog {
    templates: BTreeMap<(String, u32), Template>,
}

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("template catalog is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("template {0}: {1}")]
    Body(TemplateRef, TemplateError),
    #[error("template {0} is listed twice")]
    Duplicate(TemplateRef),
}

pub const CATALOG_JSON: &str = include_str!("../../templates/catalog.json");

impl Catalog {
    pub fn from_json(json: &str) -> Result<Self, CatalogError> {
        let file: CatalogFile = serde_json::from_str(json)?;
        let mut templates = BTreeMap::new();
        for t in file.templates {
            parse_body(&t.body).map_err(|e| CatalogError::Body(t.reference(), e))?;
            let r = t.reference();
            if templates.insert((t.name.clone(), t.version), t).is_some() {
                return Err(CatalogError::Duplicate(r));
            }
        }
        Ok(Self { templates })
    }

    /// The catalog compiled into this binary (parsed once; a broken catalog fails its unit test).
    pub fn builtin() -> &'static Catalog {
        static CATALOG: OnceLock<Catalog> = OnceLock::new();
        CATALOG.get_or_init(|| {
            Catalog::from_json(CATALOG_JSON)
                .unwrap_or_else(|e| panic!("the compiled-in template catalog is broken: {e}"))
        })
    }

    pub fn get(&self, name: &str, version: u32) -> Option<&Template> {
        self.templates.get(&(name.to_owned(), version))
    }

    pub fn has_name(&self, name: &str) -> bool {
        self.templates.keys().any(|(n, _)| n == name)
    }

    pub fn all(&self) -> impl Iterator<Item = &Template> {
        self.templates.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    const LOCK: &str = include_str!("../../templates/published.lock");

    #[test]
    fn builtin_catalog_parses() {
        assert!(Catalog::from_json(CATALOG_JSON).is_ok());
    }

    #[test]
    fn published_template_versions_never_change_or_disappear() {
        let catalog = Catalog::builtin();
        let mut pinned = BTreeSet::new();
        for line in LOCK.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#')) {
            let mut f = line.split_whitespace();
            let (Some(name), Some(version), Some(hash)) = (f.next(), f.next(), f.next()) else {
                panic!("bad lock line: {line}");
            };
            let version: u32 = version.parse().expect("version in lock file");
            let t = catalog
                .get(name, version)
                .unwrap_or_else(|| panic!("published template {name}@v{version} was removed"));
            let actual = hex::encode(Sha256::digest(t.body.as_bytes()));
            assert_eq!(actual, hash, "published template {name}@v{version} was edited: publish a new version instead");
            pinned.insert((name.to_owned(), version));
        }
        for t in catalog.all() {
            assert!(
                pinned.contains(&(t.name.clone(), t.version)),
                "template {} is not pinned in published.lock (add: {} {} {})",
                t.reference(),
                t.name,
                t.version,
                hex::encode(Sha256::digest(t.body.as_bytes()))
            );
        }
    }

    #[test]
    fn placeholders_are_parsed_and_rendered() {
        let t = Template {
            name: "x".into(),
            version: 1,
            description: String::new(),
            body: "A {{host}} B {{ pct }}%".into(),
        };
        assert_eq!(t.variables(), BTreeSet::from(["host", "pct"]));
        let vars = BTreeMap::from([("host".to_owned(), "db1".to_owned()), ("pct".to_owned(), "97".to_owned())]);
        assert_eq!(t.render(&vars), "A db1 B 97%");
    }

    #[test]
    fn malformed_bodies_are_refused() {
        assert_eq!(parse_body("a {{x"), Err(TemplateError::Unclosed(2)));
        assert_eq!(parse_body("{{X}}"), Err(TemplateError::BadName("X".into())));
        assert_eq!(parse_body("{{}}"), Err(TemplateError::BadName(String::new())));
    }
}
