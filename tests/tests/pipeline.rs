//! The whole path through real emulator calls: intake → sender → SNS → delivery-status logs →
//! status → escalation.

use chrono::Duration;
use tocsin::domain::State;
use tocsin_tests::{Pipeline, alert, key_of};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_alerts_end_delivered_failed_and_escalated_with_exactly_one_sms_each() {
    let p = Pipeline::start().await;

    let (s1, b1) = p.submit(&alert("deploy-42-disk", "+14155550101")).await;
    let (s2, b2) = p.submit(&alert("deploy-43-disk", "+14155550102")).await;
    let (s3, b3) = p.submit(&alert("deploy-44-disk", "+14155550103")).await;
    assert_eq!((s1, s2, s3), (201, 201, 201), "{b1} {b2} {b3}");
    let (k1, k2, k3) = (key_of(&b1), key_of(&b2), key_of(&b3));
    assert_eq!(p.record(&k1).await.status.state, State::Received, "on the queue, not yet claimed");

    p.run_sender().await;
    let sms = p.emulator.sent_sms().await.expect("sent list");
    assert_eq!(sms.len(), 3, "one SMS per intent: {sms:?}");
    assert!(sms.iter().all(|m| m.message == "ALERT: db-1 volume /var is 97% full."));
    let r1 = p.record(&k1).await;
    assert_eq!(r1.status.state, State::Accepted, "accepted is not delivered");
    let id_of = |k| sms.iter().find(|m| m.phone_number == k).map(|m| m.message_id.clone()).expect("sent");
    assert_eq!(r1.status.sns_message_id.as_deref(), Some(id_of("+14155550101").as_str()));

    // The carrier answers for two of them; the third stays silent.
    p.carrier_reports(&id_of("+14155550101"), "+14155550101", true, "Message has been accepted by phone carrier").await;
    p.carrier_reports(&id_of("+14155550102"), "+14155550102", false, "Unknown error attempting to reach phone").await;
    p.run_status().await;
    assert_eq!(p.record(&k1).await.status.state, State::Delivered);
    assert_eq!(p.record(&k2).await.status.state, State::Failed);
    assert_eq!(p.record(&k3).await.status.state, State::Accepted);

    // A sweep before the deadline escalates only the failed one.
    p.run_escalation().await;
    let early = p.escalations().await;
    assert_eq!(early.iter().map(|(m, _)| m.idempotency_key.clone()).collect::<Vec<_>>(), vec![k2.to_string()]);

    // Past the deadline the silent one is escalated; the delivered one never is.
    p.clock.advance(Duration::minutes(16));
    p.run_escalation().await;
    let late = p.escalations().await;
    assert_eq!(late.len(), 1, "{late:?}");
    let (msg, attrs) = &late[0];
    assert_eq!(msg.idempotency_key, k3.to_string());
    assert_eq!(attrs.get("idempotency_key"), Some(&k3.to_string()));
    assert_eq!(msg.recipient_masked, "+1******0103");
    assert!(matches!(msg.state, State::Accepted | State::DelaySuspected), "{:?}", msg.state);
    assert!(msg.reason.contains("no delivery receipt"), "{}", msg.reason);
    assert!(msg.history.iter().any(|h| h.contains("accepted by the SMS provider")), "{:?}", msg.history);

    // Nothing more on later runs: each escalated once.
    p.clock.advance(Duration::minutes(5));
    p.run_escalation().await;
    assert!(p.escalations().await.is_empty());
    assert_eq!(p.emulator.sent_sms().await.expect("sent").len(), 3, "no SMS was ever sent twice");
    assert!(p.record(&k1).await.status.escalation.is_none());
}

/// The AWS calls tocsin's own code makes for one alert on the happy path (issue 8: at most 8), to
/// an on-call number that had an alert before: 13. A number's first delivery record also writes
/// its carrier (one `UpdateItem` more). Calls AWS makes on the functions' behalf are left out: the
/// SQS event source mapping's ReceiveMessage/DeleteMessage and the log subscription (`Logs_…`, the
/// harness reading the group).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_on_call_numbers_delivered_alert_costs_thirteen_aws_calls_three_intake_seven_sender_three_status() {
    // Storm mode off: the default (on) adds the sender's backlog Query and its send-log read and
    // write (docs/storm-mode.md, "What it costs"); BENCHMARKS.md section 4 says both.
    let p =
        Pipeline::start_with(tocsin_tests::Options { env: vec![("TOCSIN_STORM_MODE", "off")], ..Default::default() })
            .await;
    let own = |ops: Vec<String>| {
        let mut ops: Vec<String> = ops
            .into_iter()
            .filter(|o| !o.starts_with("Logs_") && !o.ends_with(".ReceiveMessage") && !o.ends_with(".DeleteMessage"))
            .collect();
        ops.sort();
        ops
    };

    // Intake reads the send queue's length (late is said early) at most every 5 s per instance,
    // and intake and the sender read the recipients roster at most once a minute, not per alert:
    // a first alert reads them, so the second alert's own calls are what is counted. The first
    // alert's delivery record writes the number's carrier; the second's, naming the same carrier
    // within the hour, does not.
    let (code, body) = p.submit(&alert("calls-0", "+14155550140")).await;
    assert_eq!(code, 201, "{body}");
    p.run_sender().await;
    let first = p.record(&key_of(&body)).await.status.sns_message_id.expect("accepted");
    p.carrier_reports(&first, "+14155550140", true, "Message has been accepted by phone carrier").await;
    p.emulator.start_recording().await.expect("recording");
    p.run_status().await;
    let first_status = own(p.emulator.stop_recording().await.expect("recording"));
    assert_eq!(
        first_status,
        [
            "DynamoDB_20120810.BatchGetItem", // message-id index (up to 100 records per call)
            "DynamoDB_20120810.UpdateItem",   // delivered, on the presumed state, carrying its observation
            "DynamoDB_20120810.UpdateItem",   // the number's carrier: its first record names it
            "DynamoDB_20120810.UpdateItem"    // the batch's traffic tally per minute and carrier (counts only)
        ]
    );
    p.clock.advance(Duration::seconds(2));
    use tocsin::ports::SendQueue;
    p.intake.queue.backlog(tocsin::domain::storm::Lane::Normal).await.expect("queue length");
    p.emulator.start_recording().await.expect("recording");
    let (code, body) = p.submit(&alert("calls-1", "+14155550140")).await;
    let intake = own(p.emulator.stop_recording().await.expect("recording"));
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        intake,
        ["AmazonSQS.SendMessage", "DynamoDB_20120810.PutItem", "DynamoDB_20120810.UpdateItem"],
        "the producer's minute counter, conditional put, enqueue"
    );

    let key = key_of(&body);
    p.emulator.start_recording().await.expect("recording");
    p.run_sender().await;
    let sender = own(p.emulator.stop_recording().await.expect("recording"));
    assert_eq!(
        sender,
        [
            "DynamoDB_20120810.GetItem",    // recipient registry
            "DynamoDB_20120810.PutItem",    // what SNS answered: the observation…
            "DynamoDB_20120810.PutItem",    // …and the message-id index (facts first, no transaction)
            "DynamoDB_20120810.UpdateItem", // claim
            "DynamoDB_20120810.UpdateItem", // accepted, conditioned on the claim
            "DynamoDB_20120810.UpdateItem", // the stack's SMS spend meter (the breaker), before the publish
            "SNS.Publish"
        ]
    );

    let message_id = p.record(&key).await.status.sns_message_id.expect("accepted");
    p.carrier_reports(&message_id, "+14155550140", true, "Message has been accepted by phone carrier").await;
    p.emulator.start_recording().await.expect("recording");
    p.run_status().await;
    let status = own(p.emulator.stop_recording().await.expect("recording"));
    assert_eq!(
        status,
        [
            "DynamoDB_20120810.BatchGetItem", // message-id index (up to 100 records per call)
            "DynamoDB_20120810.UpdateItem",   // delivered, on the presumed state, carrying its observation
            "DynamoDB_20120810.UpdateItem"    // the batch's traffic tally per minute and carrier (counts only)
        ],
        "the number's carrier is not written again: the first record wrote the same one moments ago"
    );
    assert_eq!(p.record(&key).await.status.state, State::Delivered);
    assert_eq!(intake.len() + sender.len() + status.len(), 13);
    // The observation is on the intent item, not an item of its own, and is read as one.
    use tocsin::ports::IntentStore;
    let observations = p.ledger.observations(&key).await.expect("observations");
    assert!(
        observations.iter().any(|o| o.id.starts_with("log:") && o.state_after == Some(State::Delivered)),
        "{observations:?}"
    );
}
