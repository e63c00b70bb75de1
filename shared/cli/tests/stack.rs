//! `--stack NAME`: every resource the CLI uses comes from the stack's CloudFormation outputs.
//! Here the stack is deployed from `template.yaml` itself: translated by the SAM translator and
//! created by CloudFormation on the emulator (reduced as `deployable_on_emulator` says: stub
//! function code, no EventBridge rule or custom resource). `--profile` and `--region` are taken
//! as the AWS CLI takes them.

mod common;

use common::{aws_env, tocsin_with};
use tocsin_harness::cloudformation::{CloudFormationEmulator, deployable_on_emulator};

async fn deployed(name: &str) -> CloudFormationEmulator {
    let translated = tokio::task::spawn_blocking(|| tocsin_harness::sam::translate_template_yaml(&[]))
        .await
        .expect("join")
        .expect("template.yaml translates");
    let (template, _) = deployable_on_emulator(&translated);
    let cfn = CloudFormationEmulator::start().await.expect("emulator");
    cfn.create_stack(name, &template, &[]).await.expect("CloudFormation answers").expect("stack created");
    cfn
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_reads_every_resource_from_a_stack_deployed_from_template_yaml() {
    let cfn = deployed("oncall-prod").await;
    let env = aws_env(&cfn.endpoint());
    // The tables and queue the commands use exist only under the names the outputs give.
    let list = tocsin_with(env.clone(), &["--stack", "oncall-prod", "--json", "list"]).await;
    assert_eq!((list.code, list.stdout.trim()), (0, "[]"), "{list:?}");
    let esc = tocsin_with(env.clone(), &["--stack", "oncall-prod", "--json", "escalations"]).await;
    assert_eq!(esc.code, 0, "{esc:?}");
    assert_eq!(esc.json()["queue"], "oncall-prod-escalations");

    // The operator policy of oncall-prod does not cover another name: on AWS the answer is
    // AccessDenied (whether or not such a stack exists), and the CLI says which permission.
    let denied = tocsin_with(env.clone(), &["--stack", "no-such-stack", "list"]).await;
    assert_eq!(denied.code, 3, "{denied:?}");
    assert!(
        denied.stderr.contains("cloudformation:DescribeStacks")
            && denied.stderr.contains("arn:aws:cloudformation:us-east-1:123456789012:stack/no-such-stack/*"),
        "{denied:?}"
    );
    assert_eq!(cfn.iam().take_denials().len(), 1);
    // An operator whose policy covers the name learns that it does not exist.
    cfn.enforce_for("no-such-stack").await.expect("policies");
    let missing = tocsin_with(env.clone(), &["--stack", "no-such-stack", "list"]).await;
    assert_eq!(missing.code, 2, "{missing:?}");
    assert!(missing.stderr.contains("no CloudFormation stack named no-such-stack"), "{missing:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stack_without_the_outputs_the_cli_needs_is_named_not_guessed() {
    let cfn = CloudFormationEmulator::start().await.expect("emulator");
    let foreign = serde_json::json!({
        "Resources": {"Nothing": {"Type": "AWS::CloudFormation::WaitConditionHandle"}},
        "Outputs": {"LedgerTableName": {"Value": "someone-elses-table"}}
    });
    cfn.create_stack("not-tocsin", &foreign, &[]).await.expect("answers").expect("created");
    let r = tocsin_with(aws_env(&cfn.endpoint()), &["--stack", "not-tocsin", "list"]).await;
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("stack not-tocsin has no output RecipientsTableName"), "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn profile_and_region_are_taken_as_the_aws_cli_takes_them() {
    let cfn = deployed("oncall-dev").await;
    let dir = std::env::temp_dir().join(format!("tocsin-profile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let config = dir.join("config");
    let credentials = dir.join("credentials");
    std::fs::write(&config, "[profile oncall]\nregion = us-east-1\n").expect("config");
    std::fs::write(&credentials, "[oncall]\naws_access_key_id = OPERATOR\naws_secret_access_key = test\n")
        .expect("creds");
    let base = vec![
        ("AWS_ENDPOINT_URL".to_owned(), cfn.endpoint()),
        ("AWS_EC2_METADATA_DISABLED".to_owned(), "true".to_owned()),
        ("AWS_CONFIG_FILE".to_owned(), config.display().to_string()),
        ("AWS_SHARED_CREDENTIALS_FILE".to_owned(), credentials.display().to_string()),
    ];
    // No region and no keys in the environment: without the profile there is nothing to go on.
    let without = tocsin_with(base.clone(), &["--stack", "oncall-dev", "list"]).await;
    assert_eq!(without.code, 2, "{without:?}");
    assert!(without.stderr.contains("no AWS region"), "{without:?}");
    let with = tocsin_with(base.clone(), &["--profile", "oncall", "--stack", "oncall-dev", "--json", "list"]).await;
    assert_eq!(with.code, 0, "{with:?}");

    // --region wins over the profile's: the stack is in us-east-1 only, and so is the operator's
    // policy — the call in eu-west-1 is refused by IAM before CloudFormation could say more.
    let elsewhere =
        tocsin_with(base.clone(), &["--profile", "oncall", "--region", "eu-west-1", "--stack", "oncall-dev", "list"])
            .await;
    assert_eq!(elsewhere.code, 3, "{elsewhere:?}");
    assert!(
        elsewhere.stderr.contains("arn:aws:cloudformation:eu-west-1:123456789012:stack/oncall-dev/*"),
        "{elsewhere:?}"
    );
    assert_eq!(cfn.iam().take_denials().len(), 1);
    let keys_only: Vec<(String, String)> = base
        .into_iter()
        .chain([
            ("AWS_ACCESS_KEY_ID".to_owned(), "OPERATOR".to_owned()),
            ("AWS_SECRET_ACCESS_KEY".to_owned(), "test".to_owned()),
        ])
        .collect();
    let region_flag =
        tocsin_with(keys_only, &["--region", "us-east-1", "--stack", "oncall-dev", "--json", "list"]).await;
    assert_eq!(region_flag.code, 0, "{region_flag:?}");
}
