//! Test runs capture the functions' EMF metric lines per test (`tocsin_tests::emitted_metrics`):
//! tests running at the same time, other test binaries and earlier runs never mix into them.

use serde_json::Value;
use tocsin_tests::{Pipeline, alert, emitted_metrics};

/// The `created` counts intake emitted in this test.
fn created() -> usize {
    emitted_metrics()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|d| d["function"] == "intake" && d["created"].as_f64() == Some(1.0))
        .count()
}

async fn submit_distinct(prefix: &str, n: usize) {
    let p = Pipeline::start().await;
    assert_eq!(created(), 0, "a test starts with no metrics, whatever ran before");
    for i in 0..n {
        let (status, body) = p.submit(&alert(&format!("{prefix}-{i}"), &format!("+1415555{:04}", 7000 + i))).await;
        assert_eq!(status, 201, "{body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_reads_exactly_the_metrics_it_emitted_three() {
    submit_distinct("metrics-three", 3).await;
    assert_eq!(created(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_reads_exactly_the_metrics_it_emitted_five() {
    submit_distinct("metrics-five", 5).await;
    assert_eq!(created(), 5);
}
