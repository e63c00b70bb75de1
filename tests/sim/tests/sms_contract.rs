//! The SMS gateway's contract: the simulated End User Messaging (`SimEum`) and the real adapter
//! (`EumGateway`, its SDK client talking to the harness's End User Messaging stand-in on the
//! emulator) give the same answers to the same script — a send accepted, a number in the opt-out
//! list refused as the recipient's and reported opted out, the spend limit refused as the
//! account's — and both say their events name the alert. Message ids differ by nature; the
//! transcripts keep only the outcome's class and the refusal's reason.

use chrono::{Duration, Utc};
use tocsin::domain::IdempotencyKey;
use tocsin::domain::PhoneNumber;
use tocsin::domain::send_context::SendContext;
use tocsin::domain::sms::SmsOptions;
use tocsin::domain::template::TemplateRef;
use tocsin::ports::{PublishOutcome, SmsGateway, SmsMessage};
use tocsin_sim::exec::Sim;
use tocsin_sim::world::eum::SimEum;
use tocsin_sim::world::sms::{Carrier, Sms};
use tocsin_sim::world::{FaultPlan, World};

const FINE: &str = "+14155550101";
/// Even last digit and a dead carrier: the simulated world holds it in the opt-out list; on the
/// emulator the test puts it there.
const OPTED_OUT: &str = "+14155550102";

fn outcome(o: &PublishOutcome) -> String {
    match o {
        PublishOutcome::Accepted { .. } => "accepted".into(),
        PublishOutcome::Retryable { .. } => "retryable".into(),
        PublishOutcome::Unknown { .. } => "unknown".into(),
        PublishOutcome::Rejected { refusal, .. } => format!("rejected: {}", refusal.as_str()),
    }
}

async fn send<G: SmsGateway>(g: &G, to: &str, n: u32) -> String {
    let to = PhoneNumber::parse(to).expect("number");
    let template = TemplateRef { name: "disk_full".into(), version: 1 };
    let key = IdempotencyKey::derive(
        &tocsin::domain::producer::ProducerName::parse("monitoring").expect("producer"),
        &format!("contract:sms:{n}"),
        &template,
    );
    let context = SendContext::alert("tocsin-local", key, format!("attempt-{n}"));
    let options = SmsOptions::default();
    let message = SmsMessage {
        to: &to,
        body: "contract: disk full on db-1",
        options: &options,
        context: &context,
        worth_until: Utc::now() + Duration::minutes(15),
    };
    outcome(&g.publish(message).await)
}

async fn opted_out<G: SmsGateway>(g: &G, to: &str) -> String {
    let to = PhoneNumber::parse(to).expect("number");
    format!("{:?}", g.is_opted_out(&to).await.map_err(|e| e.to_string()))
}

/// The script, up to the spend limit.
async fn before_the_limit<G: SmsGateway>(g: &G) -> Vec<String> {
    vec![
        format!("records name their alert: {}", g.records_name_their_alert()),
        format!("send to a reachable number: {}", send(g, FINE, 1).await),
        format!("reachable number opted out: {}", opted_out(g, FINE).await),
        format!("opted-out number opted out: {}", opted_out(g, OPTED_OUT).await),
        format!("send to an opted-out number: {}", send(g, OPTED_OUT, 2).await),
    ]
}

fn sim_world() -> Sim {
    let mut sms = Sms::new(20);
    sms.carriers.insert(OPTED_OUT.to_owned(), Carrier::Dead);
    let sim = Sim::new(1, Utc::now().timestamp_millis(), World::new(1, FaultPlan::none(), sms));
    sim.lock().core.immediate = true;
    sim
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulated_end_user_messaging_answers_as_the_adapter_does_on_the_stand_in() {
    let p = tocsin_tests::Pipeline::start_with(tocsin_tests::Options::end_user_messaging()).await;
    let eum = aws_sdk_pinpointsmsvoicev2::Client::new(&p.emulator.sdk_config().await);
    eum.put_opted_out_number().opt_out_list_name("Default").opted_out_number(OPTED_OUT).send().await.expect("STOP");
    let gateway = &p.sender.gateway;
    let mut emulator = before_the_limit(gateway).await;
    p.emulator.eum().set_spend_exhausted(true).await.expect("the spend limit reached");
    emulator.push(format!("send at the spend limit: {}", send(gateway, FINE, 3).await));

    let sim = sim_world();
    let g = SimEum { sim: sim.clone() };
    let mut simulated = futures::executor::block_on(before_the_limit(&g));
    sim.lock().world.sms.spend_exhausted_from = Some(0);
    simulated.push(format!("send at the spend limit: {}", futures::executor::block_on(send(&g, FINE, 3))));

    assert_eq!(simulated, emulator, "the simulation, then the adapter on the stand-in");
    assert_eq!(
        emulator,
        [
            "records name their alert: true",
            "send to a reachable number: accepted",
            "reachable number opted out: Ok(false)",
            "opted-out number opted out: Ok(true)",
            "send to an opted-out number: rejected: recipient",
            "send at the spend limit: rejected: spend_limit",
        ],
        "what both must answer"
    );
}
