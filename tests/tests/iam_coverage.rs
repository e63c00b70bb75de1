//! The reverse of the IAM gate: grants no test exercises. Every gate records the grants (role ×
//! statement × action pattern × resource pattern) that allowed a call, per test, under
//! `target/tocsin-iam/exercised/`; `every_implicit_requirement…` in `iam.rs` adds what AWS does
//! with the roles without a request. After the whole suite, every Allow grant of every role (and
//! of the operator policy) must have been used by some test — or be listed below with the reason
//! no test can use it. A grant nobody uses is exercised by a new test or removed.
//!
//! The check reads the records of a whole run, so it is `#[ignore]`d in a partial run and run by
//! `.ci/run` after `cargo test --workspace`:
//! `cargo test -p tocsin-tests --test iam_coverage -- --ignored`. It writes the report to
//! `target/tocsin-iam/coverage.md` either way.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use tocsin_harness::iam::coverage::{self, Exercised};
use tocsin_harness::iam::{LOCAL_STACK, principals_with};

/// A grant no test exercises, and why that is acceptable.
struct Known {
    role: &'static str,
    /// The statement's `Sid`, or its policy's name (SAM's and AWS managed policies have no Sid).
    statement: &'static str,
    action: &'static str,
    /// The resource pattern, resolved for the local stack.
    resource: &'static str,
    reason: &'static str,
}

const ORIGINATION_IDENTITY_KINDS: &str = "End User Messaging authorises SendTextMessage on the origination identity it sends from; SmsOriginationIdentity (or a request's origination number) may be a phone number, a pool or a sender ID of this account. The emulator tests send from phone numbers (the identity US destinations need); pools and sender IDs are granted so a deployment may name one, and the same statement's phone-number grant is exercised.";

const LAMBDA_CREATES_NO_LOG_GROUP: &str = "SAM attaches AWSLambdaBasicExecutionRole to every role it generates; each function logs to a log group the stack declares, so Lambda never creates one. Dropping the grant means replacing the generated role. (AWSLambdaSQSQueueExecutionRole, which SAM adds for the SQS event source, carries the same grant.)";

const KNOWINGLY_UNEXERCISED: &[Known] = &[
    Known {
        role: "SenderFunctionRole",
        statement: "SendThroughTheStacksConfigurationSet",
        action: "sms-voice:SendTextMessage",
        resource: "arn:aws:sms-voice:us-east-1:123456789012:pool/*",
        reason: ORIGINATION_IDENTITY_KINDS,
    },
    Known {
        role: "SenderFunctionRole",
        statement: "SendThroughTheStacksConfigurationSet",
        action: "sms-voice:SendTextMessage",
        resource: "arn:aws:sms-voice:us-east-1:123456789012:sender-id/*",
        reason: ORIGINATION_IDENTITY_KINDS,
    },
    Known {
        role: "IntakeFunctionRole",
        statement: "AWSLambdaBasicExecutionRole (AWS managed)",
        action: "logs:CreateLogGroup",
        resource: "*",
        reason: LAMBDA_CREATES_NO_LOG_GROUP,
    },
    Known {
        role: "SenderFunctionRole",
        statement: "AWSLambdaBasicExecutionRole (AWS managed)",
        action: "logs:CreateLogGroup",
        resource: "*",
        reason: LAMBDA_CREATES_NO_LOG_GROUP,
    },
    Known {
        role: "StatusFunctionRole",
        statement: "AWSLambdaBasicExecutionRole (AWS managed)",
        action: "logs:CreateLogGroup",
        resource: "*",
        reason: LAMBDA_CREATES_NO_LOG_GROUP,
    },
    Known {
        role: "EscalationFunctionRole",
        statement: "AWSLambdaBasicExecutionRole (AWS managed)",
        action: "logs:CreateLogGroup",
        resource: "*",
        reason: LAMBDA_CREATES_NO_LOG_GROUP,
    },
    Known {
        role: "SmsPreferencesFunctionRole",
        statement: "AWSLambdaBasicExecutionRole (AWS managed)",
        action: "logs:CreateLogGroup",
        resource: "*",
        reason: LAMBDA_CREATES_NO_LOG_GROUP,
    },
    Known {
        role: "SmsCountryRulesFunctionRole",
        statement: "AWSLambdaBasicExecutionRole (AWS managed)",
        action: "logs:CreateLogGroup",
        resource: "*",
        reason: LAMBDA_CREATES_NO_LOG_GROUP,
    },
    Known {
        role: "SenderFunctionRole",
        statement: "AWSLambdaSQSQueueExecutionRole (AWS managed)",
        action: "logs:CreateLogGroup",
        resource: "*",
        reason: LAMBDA_CREATES_NO_LOG_GROUP,
    },
];

fn matches(k: &Known, e: &Exercised) -> bool {
    let statement = e.grant.statement.sid.as_deref().unwrap_or(&e.grant.statement.policy);
    k.role == e.role
        && (k.statement == statement || e.grant.statement.policy.ends_with(k.statement))
        && k.action == e.grant.action
        && k.resource == e.grant.resource
}

/// Every grant of the roles as deployed with either SMS provider (their conditional statements
/// differ): a grant of either must be exercised by some test.
fn grants() -> Vec<Exercised> {
    let mut all = std::collections::BTreeSet::new();
    for provider in ["end-user-messaging", "sns"] {
        let p = principals_with(LOCAL_STACK, &[("SmsProvider", provider)]).expect("template.yaml's roles");
        all.extend(coverage::grants(&p));
    }
    all.into_iter().collect()
}

#[test]
fn every_knowingly_unexercised_grant_is_a_grant_of_the_template_and_says_why() {
    let grants = grants();
    for k in KNOWINGLY_UNEXERCISED {
        assert!(k.reason.len() > 20, "{} {} {}: say why no test exercises it", k.role, k.action, k.resource);
        assert!(
            grants.iter().any(|g| matches(k, g)),
            "{} / {} / {} on {} is no longer granted: remove it from KNOWINGLY_UNEXERCISED",
            k.role,
            k.statement,
            k.action,
            k.resource
        );
    }
}

#[test]
#[ignore = "reads what the whole suite exercised: run after `cargo test --workspace` (.ci/run does)"]
fn every_grant_is_exercised_by_some_test_or_known_and_no_test_met_a_denial() {
    let records = coverage::recorded();
    assert!(
        records.len() >= 50,
        "{} test records under {}: run the whole suite first",
        records.len(),
        coverage::records_dir().display()
    );

    let mut by_grant: BTreeMap<Exercised, Vec<String>> = grants().into_iter().map(|g| (g, vec![])).collect();
    for (test, r) in &records {
        for e in &r.exercised {
            if let Some(tests) = by_grant.get_mut(e) {
                tests.push(format!("{}::{}", test.binary, test.test));
            }
        }
    }
    let denied: Vec<String> = records
        .iter()
        .flat_map(|(t, r)| r.denials.iter().map(move |d| format!("{}::{}: {}", t.binary, t.test, d.message)))
        .collect();

    let mut report = String::from("# IAM grants and the tests that exercise them\n\n");
    let _ = writeln!(report, "{} test records; generated by tests/tests/iam_coverage.rs.\n", records.len());
    let mut unexpected = Vec::new();
    let mut no_longer_unexercised = Vec::new();
    for (grant, tests) in &by_grant {
        let known = KNOWINGLY_UNEXERCISED.iter().find(|k| matches(k, grant));
        match (tests.is_empty(), known) {
            (true, Some(k)) => {
                let _ = writeln!(report, "- UNEXERCISED (known) {grant}\n  why: {}", k.reason);
            }
            (true, None) => {
                let _ = writeln!(report, "- UNEXERCISED {grant}");
                unexpected.push(grant.to_string());
            }
            (false, known) => {
                let _ = writeln!(report, "- {grant}: {} test(s), e.g. {}", tests.len(), tests[0]);
                if known.is_some() {
                    no_longer_unexercised.push(grant.to_string());
                }
            }
        }
    }
    let path = coverage::records_dir().join("coverage.md");
    let _ = std::fs::write(&path, &report);
    println!("{report}");
    assert!(denied.is_empty(), "tests met IAM denials:\n{}", denied.join("\n"));
    assert!(
        unexpected.is_empty(),
        "grants no test exercises (exercise them or remove them from template.yaml / the operator policy):\n{}\n(report: {})",
        unexpected.join("\n"),
        path.display()
    );
    assert!(
        no_longer_unexercised.is_empty(),
        "listed as unexercised but exercised now (remove them from KNOWINGLY_UNEXERCISED):\n{}",
        no_longer_unexercised.join("\n")
    );
}
