//! Status parsing throughput, CPU only: one CloudWatch Logs subscription invocation of
//! `RECORDS_PER_PAYLOAD` records through base64 + gunzip + JSON (`status::payload::decode_each`, as
//! the handler streams it), each record through `parse_record` and its classification — SNS
//! delivery-status records (`classify` of the provider response) and End User Messaging events
//! (classified by their event type and status inside `parse_record`, their context read).

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use status::payload::Piece;
use tocsin::domain::delivery::parse_record;
use tocsin::domain::provider::classify;
use tocsin_bench::workload::{RECORDS_PER_PAYLOAD, delivery_lines, envelope, eum_event_lines};

/// Records decoded, parsed and classified (all of them, for a well-formed payload): the
/// invocation's JSON envelope, then the handler's streaming decoder (`status::payload`), each
/// record parsed and classified as it is read. An SNS record is classified by its provider
/// response; an End User Messaging event is classified as it is parsed and must name its alert.
fn decode_parse_classify(invocation: &[u8]) -> usize {
    let Ok(event) = serde_json::from_slice::<serde_json::Value>(invocation) else { return 0 };
    let Some(data) = event.pointer("/awslogs/data").and_then(|d| d.as_str()) else { return 0 };
    let mut classified = 0;
    let decoded = status::payload::decode_each(data, |piece| {
        if let Piece::Event(e) = piece
            && let Ok(r) = parse_record(&e.message)
        {
            match r.context {
                Some(context) => {
                    black_box((context, r.failure));
                }
                None => {
                    black_box(classify(r.provider_response.as_deref()));
                }
            }
            classified += 1;
        }
        true
    });
    if decoded.is_err() { 0 } else { classified }
}

fn invocation(group: &str, lines: &[tocsin_harness::events::LogLine]) -> Vec<u8> {
    let invocation = envelope(group, lines).to_string().into_bytes();
    let handled = decode_parse_classify(&invocation);
    if handled != RECORDS_PER_PAYLOAD {
        eprintln!("the bench payload of {group} did not parse: {handled} of {RECORDS_PER_PAYLOAD} records classified");
        std::process::exit(1);
    }
    invocation
}

fn bench(c: &mut Criterion) {
    let now = chrono::Utc::now();
    let sns =
        invocation("sns/us-east-1/123456789012/DirectPublishToPhoneNumber", &delivery_lines(RECORDS_PER_PAYLOAD, now));
    let eum = invocation("/tocsin/tocsin-bench/sms-events", &eum_event_lines(RECORDS_PER_PAYLOAD, now));
    let (bench_group, sns_name) = tocsin_bench::cpu::STATUS_BENCH;
    let (_, eum_name) = tocsin_bench::cpu::STATUS_EUM_BENCH;
    let mut g = c.benchmark_group(bench_group);
    g.throughput(Throughput::Elements(RECORDS_PER_PAYLOAD as u64));
    g.bench_function(sns_name, |b| b.iter(|| decode_parse_classify(black_box(&sns))));
    g.bench_function(eum_name, |b| b.iter(|| decode_parse_classify(black_box(&eum))));
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(6));
    targets = bench
}
criterion_main!(benches);
