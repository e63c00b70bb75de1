//! template.yaml and this crate agree: the custom resource passes exactly the properties the
//! function reads, the delivery-status role and the function's permissions are as narrow as
//! intended, and the dashboard graphs only metrics the functions actually emit.

use std::collections::BTreeSet;

use serde_json::Value as Json;
use serde_yaml_ng::Value as Yaml;
use sms_preferences::SmsPreferencesProperties;
use tocsin_harness::stack::load_template;
use tocsin_harness::workspace_root;

fn resource(t: &Yaml, id: &str) -> Yaml {
    t.get("Resources").and_then(|r| r.get(id)).cloned().unwrap_or_else(|| panic!("template.yaml has no {id}"))
}

/// `(tag, value)` of an intrinsic in short form (`!GetAtt X.Arn` → `("GetAtt", "X.Arn")`).
fn intrinsic(v: &Yaml) -> Option<(String, Yaml)> {
    match v {
        Yaml::Tagged(t) => Some((t.tag.to_string().trim_start_matches('!').to_owned(), t.value.clone())),
        _ => None,
    }
}

fn strings(v: Option<&Yaml>) -> Vec<String> {
    match v {
        Some(Yaml::String(s)) => vec![s.clone()],
        Some(Yaml::Sequence(seq)) => seq.iter().filter_map(|x| x.as_str().map(str::to_owned)).collect(),
        _ => Vec::new(),
    }
}

#[test]
fn the_custom_resource_passes_exactly_the_properties_the_function_reads() {
    let t = load_template().expect("template.yaml");
    let r = resource(&t, "SmsPreferences");
    assert_eq!(r.get("Type").and_then(Yaml::as_str), Some("Custom::SmsPreferences"));
    let props = r.get("Properties").and_then(Yaml::as_mapping).expect("properties");
    // CloudFormation hands every property value to the function as a string.
    let mut as_sent = serde_json::Map::new();
    for (k, _) in props {
        let k = k.as_str().expect("property name");
        let v = if k == "DeliveryStatusIAMRole" { "arn:aws:iam::123456789012:role/x" } else { "7" };
        as_sent.insert(k.to_owned(), Json::String(v.into()));
    }
    let parsed: SmsPreferencesProperties =
        serde_json::from_value(Json::Object(as_sent)).expect("every property is one the function knows");
    assert!(parsed.service_token.is_some() && parsed.monthly_spend_limit.is_some());
    let role = props.get("DeliveryStatusIAMRole").and_then(intrinsic).expect("an intrinsic");
    assert_eq!(role, ("GetAtt".to_owned(), Yaml::String("SmsDeliveryStatusRole.Arn".into())));
    let limit = props.get("MonthlySpendLimit").and_then(intrinsic).expect("an intrinsic");
    assert_eq!(limit, ("Ref".to_owned(), Yaml::String("MonthlySpendLimitUsd".into())));
    let param = t.get("Parameters").and_then(|p| p.get("MonthlySpendLimitUsd")).expect("parameter");
    assert_eq!(param.get("Default").and_then(Yaml::as_str), Some(""), "empty by default: the limit is left alone");
}

/// The values the function sets come from its environment, which only a stack update changes;
/// the custom resource's properties name the same values, so that changing one is an Update
/// (the function then compares, and ignores the event's).
#[test]
fn the_function_takes_what_it_sets_from_its_environment_and_the_properties_mirror_it() {
    let t = load_template().expect("template.yaml");
    let vars = resource(&t, "SmsPreferencesFunction")
        .get("Properties")
        .and_then(|p| p.get("Environment"))
        .and_then(|e| e.get("Variables"))
        .cloned()
        .expect("the function's own environment");
    let props = resource(&t, "SmsPreferences").get("Properties").cloned().expect("properties");
    for (var, property) in [
        (sms_preferences::DELIVERY_STATUS_ROLE_VAR, "DeliveryStatusIAMRole"),
        (sms_preferences::MONTHLY_SPEND_LIMIT_VAR, "MonthlySpendLimit"),
    ] {
        let from_env = vars.get(var).and_then(intrinsic).unwrap_or_else(|| panic!("{var}: an intrinsic"));
        let from_props = props.get(property).and_then(intrinsic).unwrap_or_else(|| panic!("{property}"));
        assert_eq!(from_env, from_props, "{var} and the property {property} name the same value");
    }
}

#[test]
fn the_delivery_status_role_is_for_sns_only_writes_only_the_two_delivery_log_groups_and_outlives_the_stack() {
    let t = load_template().expect("template.yaml");
    let role = resource(&t, "SmsDeliveryStatusRole");
    assert_eq!(role.get("DeletionPolicy").and_then(Yaml::as_str), Some("Retain"));
    let p = role.get("Properties").expect("properties");
    let trust = p.get("AssumeRolePolicyDocument").and_then(|d| d.get("Statement")).and_then(Yaml::as_sequence);
    let trust = trust.expect("trust policy");
    assert_eq!(trust.len(), 1);
    assert_eq!(
        trust[0].get("Principal").and_then(|pr| pr.get("Service")).and_then(Yaml::as_str),
        Some("sns.amazonaws.com")
    );
    let policies = p.get("Policies").and_then(Yaml::as_sequence).expect("policies");
    let mut groups = BTreeSet::new();
    for statement in
        policies.iter().filter_map(|pol| pol.get("PolicyDocument")?.get("Statement")?.as_sequence()).flatten()
    {
        for action in strings(statement.get("Action")) {
            assert!(action.starts_with("logs:") && !action.contains('*'), "{action}");
        }
        for res in statement.get("Resource").and_then(Yaml::as_sequence).expect("resources") {
            let (tag, v) = intrinsic(res).expect("a !Sub per log group");
            assert_eq!(tag, "Sub");
            let text = v.as_str().expect("text").to_owned();
            let group = text.split("log-group:").nth(1).expect("a log group ARN");
            groups.insert(group.trim_end_matches(":*").to_owned());
        }
    }
    assert_eq!(
        groups,
        // By name: the stack may adopt groups it did not create (CreateSmsLogGroups=false).
        BTreeSet::from([
            "sns/${AWS::Region}/${AWS::AccountId}/DirectPublishToPhoneNumber".to_owned(),
            "sns/${AWS::Region}/${AWS::AccountId}/DirectPublishToPhoneNumber/Failure".to_owned(),
        ]),
        "only the delivery-status log groups"
    );
}

#[test]
fn the_function_has_one_documented_wildcard_and_passes_only_the_delivery_status_role() {
    let t = load_template().expect("template.yaml");
    let f = resource(&t, "SmsPreferencesFunction");
    let build = f.get("Metadata").and_then(|m| m.get("BuildProperties")).and_then(|b| b.get("Binary"));
    assert_eq!(build.and_then(Yaml::as_str), Some("sms-preferences"));
    let statements: Vec<Yaml> = f
        .get("Properties")
        .and_then(|p| p.get("Policies"))
        .and_then(Yaml::as_sequence)
        .into_iter()
        .flatten()
        .filter_map(|p| p.get("Statement")?.as_sequence().cloned())
        .flatten()
        .collect();
    for s in &statements {
        let actions = strings(s.get("Action"));
        if s.get("Resource").and_then(Yaml::as_str) == Some("*") {
            assert_eq!(actions, ["sns:SetSMSAttributes"], "the only action on Resource \"*\"");
        }
        if actions.iter().any(|a| a == "iam:PassRole") {
            let (tag, v) = s.get("Resource").and_then(intrinsic).expect("scoped");
            assert_eq!((tag.as_str(), v.as_str()), ("GetAtt", Some("SmsDeliveryStatusRole.Arn")));
        }
    }
    assert!(statements.iter().any(|s| strings(s.get("Action")) == ["iam:PassRole"]));
}

/// The dashboard body with `${…}` substitutions made (parameters take their defaults).
fn dashboard(t: &Yaml) -> Json {
    let body = resource(t, "Dashboard").get("Properties").and_then(|p| p.get("DashboardBody")).cloned();
    let (tag, text) = body.as_ref().and_then(intrinsic).expect("DashboardBody: !Sub");
    assert_eq!(tag, "Sub");
    let text = text.as_str().expect("text");
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let end = rest[start..].find('}').expect("closed") + start;
        let name = &rest[start + 2..end];
        let value = match name.strip_prefix('!') {
            Some(literal) => format!("${{{literal}}}"),
            None => {
                let default = t.get("Parameters").and_then(|p| p.get(name)).and_then(|p| p.get("Default"));
                match default {
                    Some(Yaml::Number(n)) => n.to_string(),
                    Some(Yaml::String(s)) => s.clone(),
                    _ => {
                        let resource = name.split('.').next().unwrap_or_default();
                        assert!(
                            name.starts_with("AWS::") || t.get("Resources").and_then(|r| r.get(resource)).is_some(),
                            "${{{name}}} names nothing in the template"
                        );
                        "placeholder".to_owned()
                    }
                }
            }
        };
        out.push_str(&value);
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("DashboardBody is not JSON: {e}\n{out}"))
}

fn emitted_by(function: &str, metric: &str) -> bool {
    let dir = workspace_root().join("functions").join(function).join("src");
    std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .any(|src| src.contains(&format!("\"{metric}\"")))
}

#[test]
fn the_dashboard_graphs_only_metrics_the_functions_emit() {
    let t = load_template().expect("template.yaml");
    let d = dashboard(&t);
    let mut checked = BTreeSet::new();
    for w in d["widgets"].as_array().expect("widgets") {
        let mut previous: Vec<Json> = Vec::new();
        for row in w["properties"]["metrics"].as_array().into_iter().flatten() {
            let row = row.as_array().expect("a metric row");
            if let Some(expr) = row.first().and_then(|e| e.get("expression")).and_then(Json::as_str) {
                let function = expr.split("function=\"").nth(1).and_then(|s| s.split('"').next());
                let metric = expr.split("MetricName=\"").nth(1).and_then(|s| s.split('"').next());
                let (Some(function), Some(metric)) = (function, metric) else { panic!("unscoped SEARCH: {expr}") };
                assert!(emitted_by(function, metric), "{function} emits no {metric:?} ({expr})");
                checked.insert(format!("{function}/{metric}"));
                continue;
            }
            // Resolve "." (same as the row above) in the [namespace, name, dim, value, …] form.
            let resolved: Vec<Json> = row
                .iter()
                .enumerate()
                .map(|(i, v)| if v == "." { previous.get(i).cloned().unwrap_or(Json::Null) } else { v.clone() })
                .collect();
            if resolved.first().and_then(Json::as_str) == Some("tocsin") {
                let metric = resolved[1].as_str().expect("metric name");
                assert_eq!(resolved[2], "function", "{resolved:?}");
                let function = resolved[3].as_str().expect("function");
                assert!(emitted_by(function, metric), "{function} emits no {metric:?}");
                checked.insert(format!("{function}/{metric}"));
            }
            previous = resolved;
        }
    }
    for must in ["status/dwell_ms", "status/price_usd", "sender/throttled_or_retry", "escalation/escalated"] {
        assert!(checked.contains(must), "the dashboard graphs {must}");
    }
}
