//! A digest's identity, derived from its member keys: recorded on each member intent's status
//! and on the digest item. A leaf below `intent` and `storm`: it imports only `key`.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use super::key::IdempotencyKey;

/// A digest's identity: SHA-256 over `"tocsin/digest/v1" 0x00` and the sorted, distinct member
/// keys (64 hex characters each, so the concatenation is unambiguous). The same members give the
/// same id whatever their order, so a retried invocation builds the same digest.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DigestId(String);

const DIGEST_TAG: &[u8] = b"tocsin/digest/v1\0";

impl DigestId {
    pub fn derive<'a>(members: impl IntoIterator<Item = &'a IdempotencyKey>) -> Self {
        let sorted: BTreeSet<&IdempotencyKey> = members.into_iter().collect();
        let mut h = Sha256::new();
        h.update(DIGEST_TAG);
        for k in sorted {
            h.update(k.as_str().as_bytes());
        }
        Self(hex::encode(h.finalize()))
    }

    /// A stored id read back: 64 lowercase hex characters, else `None`.
    pub fn parse(raw: &str) -> Option<Self> {
        (raw.len() == 64 && raw.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
            .then(|| Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The first 8 characters: the `ref` printed in the SMS, for `tocsin show`.
    pub fn short(&self) -> &str {
        self.0.get(..8).unwrap_or(&self.0)
    }
}

impl fmt::Display for DigestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for DigestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DigestId({})", self.0)
    }
}
