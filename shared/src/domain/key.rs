//! The idempotency key: one business event and one template identity give one key, forever.
//!
//! Byte layout hashed with SHA-256 (documented in docs/data-model.md, "The idempotency key"):
//!
//! ```text
//! "tocsin/idempotency/v2" 0x00
//! u32 big-endian byte length of producer   || producer name (UTF-8)
//! u32 big-endian byte length of event_id   || event_id (UTF-8)
//! u32 big-endian byte length of template   || template name (UTF-8)
//! u32 big-endian template version
//! ```
//! Length prefixes make the encoding injective: `("a:b", "c")` and `("a", "b:c")` differ. The
//! producer is part of the key, so two producers' equal event ids are two alerts: neither can
//! claim the other's (v1, before producers were named, had no producer).

use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::producer::ProducerName;
use super::template::TemplateRef;

#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct IdempotencyKey(String);

#[derive(Debug, thiserror::Error)]
#[error("an idempotency key is 64 lowercase hex characters")]
pub struct KeyFormatError;

const DOMAIN_TAG: &[u8] = b"tocsin/idempotency/v2\0";

impl IdempotencyKey {
    pub fn derive(producer: &ProducerName, event_id: &str, template: &TemplateRef) -> Self {
        let mut h = Sha256::new();
        h.update(DOMAIN_TAG);
        for part in [producer.as_str().as_bytes(), event_id.as_bytes(), template.name.as_bytes()] {
            let len = u32::try_from(part.len()).unwrap_or(u32::MAX);
            h.update(len.to_be_bytes());
            h.update(part);
        }
        h.update(template.version.to_be_bytes());
        Self(hex::encode(h.finalize()))
    }

    pub fn parse(raw: &str) -> Result<Self, KeyFormatError> {
        if raw.len() == 64 && raw.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            Ok(Self(raw.to_owned()))
        } else {
            Err(KeyFormatError)
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The first 12 characters: enough to find an intent in a log, short enough to read.
    pub fn short(&self) -> &str {
        &self.0[..12]
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IdempotencyKey({})", self.0)
    }
}

impl TryFrom<String> for IdempotencyKey {
    type Error = KeyFormatError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<IdempotencyKey> for String {
    fn from(value: IdempotencyKey) -> Self {
        value.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(name: &str) -> ProducerName {
        ProducerName::parse(name).expect("producer")
    }

    fn t(name: &str, version: u32) -> TemplateRef {
        TemplateRef { name: name.into(), version }
    }

    #[test]
    fn same_event_and_template_give_the_same_key() {
        assert_eq!(
            IdempotencyKey::derive(&p("monitoring"), "evt-1", &t("service_down", 1)),
            IdempotencyKey::derive(&p("monitoring"), "evt-1", &t("service_down", 1))
        );
    }

    #[test]
    fn key_matches_the_documented_byte_layout() {
        // Recomputed by hand from the layout in the module docs; pins the format forever.
        let mut bytes = b"tocsin/idempotency/v2\0".to_vec();
        bytes.extend(10u32.to_be_bytes());
        bytes.extend(b"monitoring");
        bytes.extend(5u32.to_be_bytes());
        bytes.extend(b"evt-1");
        bytes.extend(12u32.to_be_bytes());
        bytes.extend(b"service_down");
        bytes.extend(1u32.to_be_bytes());
        let expected = hex::encode(Sha256::digest(&bytes));
        assert_eq!(IdempotencyKey::derive(&p("monitoring"), "evt-1", &t("service_down", 1)).as_str(), expected);
    }

    #[test]
    fn a_new_template_version_is_a_new_key() {
        assert_ne!(
            IdempotencyKey::derive(&p("monitoring"), "evt-1", &t("service_down", 1)),
            IdempotencyKey::derive(&p("monitoring"), "evt-1", &t("service_down", 2))
        );
    }

    #[test]
    fn field_boundaries_cannot_be_shifted_to_collide() {
        assert_ne!(
            IdempotencyKey::derive(&p("monitoring"), "a:b", &t("c", 1)),
            IdempotencyKey::derive(&p("monitoring"), "a", &t("b:c", 1))
        );
    }

    #[test]
    fn two_producers_equal_event_ids_are_two_keys() {
        assert_ne!(
            IdempotencyKey::derive(&p("billing"), "evt-1", &t("service_down", 1)),
            IdempotencyKey::derive(&p("monitoring"), "evt-1", &t("service_down", 1))
        );
        assert_ne!(
            IdempotencyKey::derive(&p("a"), ".b", &t("x", 1)),
            IdempotencyKey::derive(&p("a."), "b", &t("x", 1))
        );
    }

    #[test]
    fn parse_accepts_only_derived_shapes() {
        let k = IdempotencyKey::derive(&p("monitoring"), "e", &t("x", 1));
        assert!(IdempotencyKey::parse(k.as_str()).is_ok());
        assert!(IdempotencyKey::parse("ABC").is_err());
        assert!(IdempotencyKey::parse(&k.as_str().to_uppercase()).is_err());
    }
}
