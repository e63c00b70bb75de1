//! Which grants the tests exercise. Every gate writes, when dropped, the grants that allowed a
//! call (and any denial) to `target/tocsin-iam/exercised/<test binary>/<test>.json`, emptied when
//! the test starts its first gate. After a whole run, [`unexercised`] lists every Allow grant
//! (role × statement × action pattern × resource pattern) no test used: exercise it or remove it.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use super::gate::Denial;
use super::policy::{Effect, Grant, StatementRef};
use super::roles::Principals;

/// One grant of one role: what allowed a call.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct Exercised {
    pub role: String,
    pub grant: Grant,
}

impl Exercised {
    /// A grant of `role`, identified by its statement's Sid where it has one: a statement that a
    /// condition (`Fn::If`, e.g. the SMS provider) adds before it moves it down the list, and it
    /// is still the same grant under every set of parameters.
    pub fn new(role: &str, mut grant: Grant) -> Exercised {
        if grant.statement.sid.is_some() {
            grant.statement.index = 0;
        }
        Exercised { role: role.to_owned(), grant }
    }
}

impl std::fmt::Display for Exercised {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {} — {} on {}", self.role, self.grant.statement, self.grant.action, self.grant.resource)
    }
}

/// A test, as libtest runs it: the binary (without cargo's hash) and the test's name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub struct TestId {
    pub binary: String,
    pub test: String,
}

/// The test running on this thread (libtest names each test's thread after it).
pub fn current_test() -> TestId {
    let binary = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "unknown".into());
    let binary = match binary.rsplit_once('-') {
        Some((name, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => name.to_owned(),
        _ => binary,
    };
    let test = match std::thread::current().name() {
        Some(name) if !name.starts_with("tokio-") && name != "main" => name.replace("::", "."),
        _ => "untracked".to_owned(),
    };
    TestId { binary, test }
}

/// `target/tocsin-iam/` (under `CARGO_TARGET_DIR` when set).
pub fn records_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::workspace_root().join("target"))
        .join("tocsin-iam")
}

fn file_of(test: &TestId) -> PathBuf {
    records_dir().join("exercised").join(&test.binary).join(format!("{}.json", test.test))
}

/// One test's record.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Record {
    pub exercised: BTreeSet<Exercised>,
    pub denials: Vec<Denial>,
}

fn lock() -> &'static Mutex<HashSet<TestId>> {
    static STARTED: OnceLock<Mutex<HashSet<TestId>>> = OnceLock::new();
    STARTED.get_or_init(|| Mutex::new(HashSet::new()))
}

/// A test starts a gate: its record from an earlier run is removed (once per process).
pub fn starting(test: &TestId) {
    if let Ok(mut started) = lock().lock()
        && started.insert(test.clone())
    {
        let _ = std::fs::remove_file(file_of(test));
    }
}

/// Adds to `test`'s record.
pub fn record(test: &TestId, exercised: &BTreeSet<Exercised>, denials: &[Denial]) {
    let Ok(_guard) = lock().lock() else { return };
    let path = file_of(test);
    let mut r: Record = std::fs::read(&path).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
    r.exercised.extend(exercised.iter().cloned());
    r.denials.extend(denials.iter().cloned());
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    if let Ok(text) = serde_json::to_vec_pretty(&r) {
        let _ = std::fs::write(&path, text);
    }
}

/// Every record on disk, by test.
pub fn recorded() -> BTreeMap<TestId, Record> {
    let mut out = BTreeMap::new();
    let root = records_dir().join("exercised");
    for binary in std::fs::read_dir(&root).into_iter().flatten().flatten() {
        let name = binary.file_name().to_string_lossy().into_owned();
        for f in std::fs::read_dir(binary.path()).into_iter().flatten().flatten() {
            let path = f.path();
            let Some(test) = path.file_stem().map(|s| s.to_string_lossy().into_owned()) else { continue };
            if let Some(r) = std::fs::read(&path).ok().and_then(|b| serde_json::from_slice::<Record>(&b).ok()) {
                out.insert(TestId { binary: name.clone(), test }, r);
            }
        }
    }
    out
}

/// Every Allow grant of every role (and of the operator policies, counted once: as the operator
/// with MFA holds them; the read-only and no-MFA operators are the same policies seen from
/// narrower sessions, for the tests that prove what they refuse).
pub fn grants(p: &Principals) -> BTreeSet<Exercised> {
    let mut out = BTreeSet::new();
    let narrower = [super::roles::READ_ONLY_OPERATOR, super::roles::OPERATOR_WITHOUT_MFA];
    for role in p.roles.values().filter(|r| !narrower.contains(&r.id.as_str())) {
        for policy in &role.policies {
            for (index, s) in policy.statements.iter().enumerate() {
                if s.effect != Effect::Allow {
                    continue;
                }
                let statement = StatementRef { policy: policy.name.clone(), index, sid: s.sid.clone() };
                for action in s.actions.grants() {
                    for resource in s.resources.grants() {
                        out.insert(Exercised::new(
                            &role.id,
                            Grant { statement: statement.clone(), action: action.clone(), resource },
                        ));
                    }
                }
            }
        }
    }
    out
}

/// The grants of `p` that no record exercised.
pub fn unexercised<'a>(p: &Principals, records: impl IntoIterator<Item = &'a Record>) -> BTreeSet<Exercised> {
    let used: BTreeSet<Exercised> = records.into_iter().flat_map(|r| r.exercised.iter().cloned()).collect();
    grants(p).difference(&used).cloned().collect()
}
