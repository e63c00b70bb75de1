//! Every sample event in `events/replies/` is accepted by the real `replies` binary, run under a
//! Lambda Runtime API stand-in against the local emulator, configured from template.yaml.

use tocsin_harness::runtime_api::Invocation;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sample_event_is_accepted_through_the_runtime_interface() {
    let answers = tocsin_harness::invoke_events_through_runtime_with(
        env!("CARGO_BIN_EXE_replies"),
        "RepliesFunction",
        "replies",
        &[("SmsProvider", "end-user-messaging"), ("Replies", "on")],
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(!answers.is_empty(), "events/replies/ has samples");
    for (file, answer) in answers {
        assert!(matches!(answer, Invocation::Response(_)), "events/replies/{file}: {answer:?}");
    }
}
