//! Reply codes on the emulator (issue 37): the ledger's conditional write is what keeps two
//! senders from giving one phone's code to two open alerts at once.

use chrono::Duration;
use tocsin::domain::reply::{AckSubject, ReplyCode};
use tocsin::domain::{IdempotencyKey, PhoneNumber};
use tocsin::ports::{Clock, ReplyCodes};
use tocsin::services::reply_codes::give_code;
use tocsin_tests::Pipeline;

fn alert(n: u8) -> AckSubject {
    AckSubject::Alert(IdempotencyKey::parse(&format!("{n:02x}").repeat(32)).expect("a key"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn senders_giving_codes_to_one_phone_at_once_never_give_one_code_twice() {
    let p = Pipeline::start().await;
    let phone = PhoneNumber::parse("+12065550190").expect("number");
    let now = p.clock.now();
    let expires = now + Duration::days(31);
    let givers = (1..=12u8).map(|n| {
        let (ledger, phone) = (&p.ledger, &phone);
        async move { give_code(ledger, phone, &alert(n), now, expires).await.expect("a code") }
    });
    let mut codes: Vec<u16> = futures::future::join_all(givers).await.into_iter().map(ReplyCode::get).collect();
    codes.sort_unstable();
    assert_eq!(codes, (1..=12).collect::<Vec<u16>>(), "twelve open alerts, twelve distinct codes from 1");

    let held = p.inspect.held_codes(&phone).await.expect("read");
    assert_eq!(held.len(), 12);
    for n in 1..=12u8 {
        let mine = held.iter().find(|h| h.subject == alert(n)).expect("each alert holds its code");
        let again = give_code(&p.ledger, &phone, &alert(n), now, expires).await.expect("a code");
        assert_eq!(again, mine.code, "a retried send shows the code its alert already holds");
    }
}
