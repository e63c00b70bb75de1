//! Arbitrary bytes as a CloudWatch Logs subscription invocation and as single SNS delivery-status
//! records: decoding (base64 + gzip + JSON), record parsing, provider-response classification and
//! the state machine must never panic, and an unknown status must never read as a delivery.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tocsin::domain::delivery::{DeliveryStatus, parse_record};
use tocsin::domain::provider::classify;
use tocsin::domain::state::{ALL_STATES, Receipt, apply_receipt};

fn exercise(message: &str) {
    if let Ok(r) = parse_record(message) {
        let _ = classify(r.provider_response.as_deref());
        match (&r.status, r.status.receipt()) {
            (DeliveryStatus::Other(_), Some(_)) => panic!("an unknown status read as a receipt"),
            (_, Some(receipt)) => {
                for s in ALL_STATES {
                    let _ = apply_receipt(s, receipt);
                }
            }
            (_, None) => {}
        }
        assert!(r.status.receipt() != Some(Receipt::Delivered) || r.status == DeliveryStatus::Success);
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(payload) = status::decode(data) {
        for e in &payload.log_events {
            exercise(&e.message);
        }
    }
    exercise(&String::from_utf8_lossy(data));
});
