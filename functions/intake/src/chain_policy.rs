//! The templates' chain policies as intake reads them (`tocsin::domain::chain_policy`): read whole
//! at most once a minute per instance ([`tocsin::services::refreshed`]), so `tocsin chains set`
//! takes effect within a minute.

use chrono::{DateTime, Utc};
use tocsin::domain::chain_policy::ChainPolicies;
use tocsin::ports::{ChainPolicySource, PortResult};
use tocsin::services::refreshed::Refreshed;

pub struct PolicyCache<P> {
    source: P,
    memo: Refreshed<ChainPolicies>,
}

impl<P: ChainPolicySource> PolicyCache<P> {
    pub fn new(source: P) -> Self {
        PolicyCache { source, memo: Refreshed::new("chain policies") }
    }

    /// Where the policies are read from.
    pub fn source(&self) -> &P {
        &self.source
    }

    /// The policies as of at most a minute before `now`.
    pub async fn policies(&self, now: DateTime<Utc>) -> PortResult<ChainPolicies> {
        self.memo.get(now, || self.source.chain_policies()).await
    }
}
