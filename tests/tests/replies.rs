//! Acknowledgement by reply (issue 37), on the emulator through End User Messaging's stand-in:
//! with `Replies=on` every SMS shows its reply code, a digest one code for all it carries, and a
//! code is marked sent once the provider accepted its SMS.

use tocsin::domain::PhoneNumber;
use tocsin::domain::reply::AckSubject;
use tocsin::domain::storm::DigestId;
use tocsin::ports::ReplyCodes;
use tocsin_tests::{Options, Pipeline, alert, key_of};

fn replies_on() -> Options {
    let mut o = Options::end_user_messaging();
    o.parameters.push(("Replies", "on"));
    o.env.push(("TOCSIN_STORM_MODE", "off"));
    o
}

fn phone(n: &str) -> PhoneNumber {
    PhoneNumber::parse(n).expect("number")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_sms_shows_its_own_reply_code_and_the_code_is_marked_sent_once_accepted() {
    let p = Pipeline::start_with(replies_on()).await;
    let to = "+14155550301";
    let mut keys = Vec::new();
    for id in ["reply-a", "reply-b"] {
        let (status, body) = p.submit(&alert(id, to)).await;
        assert_eq!(status, 201, "{body}");
        keys.push(key_of(&body));
    }
    p.run_sender().await;
    let held = p.inspect.held_codes(&phone(to)).await.expect("codes");
    assert_eq!(held.len(), 2, "{held:?}");
    let texts = p.emulator.eum().sent_texts().await.expect("texts");
    assert_eq!(texts.len(), 2);
    for key in &keys {
        let code = held.iter().find(|h| h.subject == AckSubject::Alert(key.clone())).expect("a code per alert");
        assert!(code.sent_at.is_some(), "marked sent: {code:?}");
        let text = texts
            .iter()
            .find(|t| t.context.as_ref().and_then(|c| c.get("tocsin-key")) == Some(&key.to_string()))
            .expect("its SMS");
        assert!(text.body.ends_with(&format!(" - Reply {} to ack", code.code)), "{:?}", text.body);
        assert_eq!(text.encoding, "GSM", "the prompt keeps the SMS in GSM-7");
    }
    let mut codes: Vec<u16> = held.iter().map(|h| h.code.get()).collect();
    codes.sort_unstable();
    assert_eq!(codes, vec![1, 2], "two open alerts on one phone: two codes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_digest_shows_one_code_for_everything_it_carries() {
    let mut o = replies_on();
    o.env.retain(|(k, _)| *k != "TOCSIN_STORM_MODE");
    o.env.push(("TOCSIN_STORM_MODE", "on"));
    let p = Pipeline::start_with(o).await;
    let to = "+14155550302";
    let mut keys = Vec::new();
    for i in 0..3 {
        let (status, body) = p.submit(&alert(&format!("reply-storm-{i}"), to)).await;
        assert_eq!(status, 201, "{body}");
        keys.push(key_of(&body));
    }
    p.run_sender().await;
    let texts = p.emulator.eum().sent_texts().await.expect("texts");
    assert_eq!(texts.len(), 1, "one digest");
    let held = p.inspect.held_codes(&phone(to)).await.expect("codes");
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0].subject, AckSubject::Digest(DigestId::derive(keys.iter())));
    assert!(held[0].sent_at.is_some());
    assert!(texts[0].body.ends_with(&format!(" - Reply {} to ack all 3", held[0].code)), "{:?}", texts[0].body);
    assert_eq!(texts[0].parts, 1, "the digest left room for its prompt");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_replies_no_code_is_given_and_the_sms_is_the_template_text() {
    let mut o = Options::end_user_messaging();
    o.env.push(("TOCSIN_STORM_MODE", "off"));
    let p = Pipeline::start_with(o).await;
    let to = "+14155550303";
    let (status, body) = p.submit(&alert("reply-off", to)).await;
    assert_eq!(status, 201, "{body}");
    p.run_sender().await;
    let texts = p.emulator.eum().sent_texts().await.expect("texts");
    assert!(!texts[0].body.contains("Reply"), "{:?}", texts[0].body);
    assert!(p.inspect.held_codes(&phone(to)).await.expect("codes").is_empty());
}
