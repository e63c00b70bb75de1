//! How a [`Transition`]'s writes reach a store, in the order its [`Commit`] mode asks, for any
//! store that offers the four single writes of [`TransitionWrites`]: the DynamoDB ledger, and the
//! deterministic simulation's in-memory ledger (`tests/sim`), which thereby crashes, loses answers
//! and interleaves between exactly the writes DynamoDB sees. No AWS here.

use std::future::Future;

use crate::domain::intent::IntentRecord;
use crate::domain::observation::Observation;
use crate::ports::{Commit, PortResult, Transition, TransitionOutcome};

/// The single writes a transition is made of, each one request to the store.
pub trait TransitionWrites: Send + Sync {
    /// Stores the transition's observation unless it is stored already (its id is the
    /// de-duplication key; an expired leftover of an earlier life counts as absent). True: stored
    /// by this call.
    fn put_observation(&self, t: &Transition) -> impl Future<Output = PortResult<bool>> + Send;
    /// Writes the transition's SNS message-id → intent entry, if it has one. Idempotent: the same
    /// message id always names the same intent.
    fn put_message_index(&self, t: &Transition) -> impl Future<Output = PortResult<()>> + Send;
    /// The conditional update of the intent item alone; when `carry`, carrying the transition's
    /// observation on the intent in the same write, and refused when the intent carries it
    /// already. `None`: applied. `Some`: refused, with the intent as it is and the transition's
    /// observation as the intent carries it (an earlier try of this very transition made it).
    fn update_intent(
        &self,
        t: &Transition,
        carry: bool,
    ) -> impl Future<Output = PortResult<Option<(IntentRecord, Option<Observation>)>>> + Send;
    /// Everything in one all-or-nothing transaction: the intent's update (or, when it changes
    /// nothing on the intent, its condition alone), the observation, the message-index entry, and
    /// the open-escalation entry of a transition that escalates.
    fn transact(&self, t: &Transition) -> impl Future<Output = PortResult<TransitionOutcome>> + Send;
}

/// The mode a transition is actually written in: a transition that opens an escalation is
/// always atomic (its open-escalations entry must exist exactly when the escalation does), and so
/// is one that changes nothing on the intent (an observation under a condition), unless the
/// observation is carried on the intent: that write is the change.
pub fn effective_commit(t: &Transition) -> Commit {
    let nothing_to_write = !t.changes_intent() && t.commit != Commit::Carried;
    if t.patch.escalation.is_some() || nothing_to_write { Commit::Atomic } else { t.commit }
}

/// Applies `t` through `store`'s single writes, in its commit mode's order. Every mode keeps the
/// transition's contract ([`Commit`]): the state changes only if its conditions hold, the
/// observation is stored once, and a retry of the same transition after a crash at any point
/// ends with both written.
pub async fn transition<W: TransitionWrites>(store: &W, t: Transition) -> PortResult<TransitionOutcome> {
    match effective_commit(&t) {
        Commit::Atomic => match store.transact(&t).await? {
            // The fact is stored, but not necessarily by a transaction: the same fact written in
            // order by another function (the sender and the sweep both record a lapsed lease)
            // may have stopped between its observation and its state write. Complete the state
            // under the transition's own conditions; refused, the change is already there (or
            // the intent has moved on) and nothing is written.
            TransitionOutcome::AlreadyApplied if t.changes_intent() && t.patch.escalation.is_none() => {
                match store.update_intent(&t, false).await? {
                    None => Ok(TransitionOutcome::Applied),
                    Some(_) => Ok(TransitionOutcome::AlreadyApplied),
                }
            }
            other => Ok(other),
        },
        Commit::FactsFirst => {
            let (stored_now, ()) = futures::try_join!(store.put_observation(&t), store.put_message_index(&t))?;
            let stored_before = !stored_now;
            match store.update_intent(&t, false).await? {
                None => Ok(TransitionOutcome::Applied),
                // The intent already shows the change, and the observation was there before
                // this call or the intent carries this change's message id: a retry of this
                // very transition (or the SDK's retry of an update whose answer was lost).
                Some((current, _))
                    if t.patch.state.is_none_or(|s| s == current.status.state)
                        && (stored_before
                            || t.patch
                                .sns_message_id
                                .as_ref()
                                .is_some_and(|m| current.status.sns_message_id.as_ref() == Some(m))) =>
                {
                    Ok(TransitionOutcome::AlreadyApplied)
                }
                Some((current, _)) => Ok(TransitionOutcome::Refused(Box::new(current))),
            }
        }
        Commit::Carried => {
            store.put_message_index(&t).await?;
            match store.update_intent(&t, true).await? {
                None => Ok(TransitionOutcome::Applied),
                // Made by an earlier try of this transition (its answer lost, or its function
                // ended before it could report): the change and its observation are there, as
                // that try decided them — never this try's presumption.
                Some((_, Some(carried))) if carried.id == t.observation.id => Ok(TransitionOutcome::AlreadyApplied),
                Some((current, _)) => Ok(TransitionOutcome::Refused(Box::new(current))),
            }
        }
    }
}
