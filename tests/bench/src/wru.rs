//! Write units of one delivered alert, measured: the real pipeline (`tocsin_tests::Pipeline`:
//! submit → sender → carrier's SUCCESS record → status) runs with the emulator's request recorder
//! on around each handler; every write request (PutItem, UpdateItem, DeleteItem,
//! TransactWriteItems, BatchWriteItem) is read back from the recording and applied, in order, to
//! an image of the tables taken just before the phase, so each write's item size before and after
//! is known. The images after each phase are checked against the emulator's own items.
//!
//! Sizes follow AWS's item-size rules (DynamoDB Developer Guide, "Item sizes and formats"):
//! attribute name bytes + value bytes; strings and binaries their bytes; numbers
//! ⌈significant digits ÷ 2⌉ + 1 (+1 when negative); booleans and nulls 1; lists and maps 3 + 1 per
//! element; sets the sum of their elements. A write costs one WRU per started KB of the larger of
//! the item's sizes before and after it, twice inside TransactWriteItems. Each global secondary
//! index the item is in before or after costs its own writes (projection from template.yaml):
//! entering or leaving a (sparse) index 1 write, a changed index key a delete and a put (2), a
//! changed projected attribute 1; an index entry's size is the table key + the index key + the
//! projected attributes + 100 bytes (AWS's index entry overhead).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use base64::Engine;
use lambda_runtime::tracing::subscriber::{self, layer::SubscriberExt, util::SubscriberInitExt};
use serde_json::{Map, Value};
use tocsin_harness::RecordedRequest;
use tocsin_harness::events::sqs_event;
use tocsin_tests::{Pipeline, alert, key_of};

use crate::{BenchError, Result};

/// The goal, WRU per delivered alert.
pub const TARGET_WRU: f64 = 12.0;
/// AWS: overhead of one index entry (table key and index key are counted besides).
pub const INDEX_ENTRY_OVERHEAD: usize = 100;
const KB: usize = 1024;

// ------------------------------------------------------------------ item-size arithmetic

/// Size in bytes of a DynamoDB number given as its decimal text.
pub fn number_size(text: &str) -> usize {
    let t = text.trim();
    let negative = t.starts_with('-');
    let mantissa = t.split(['e', 'E']).next().unwrap_or_default();
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let significant = digits.trim_start_matches('0').trim_end_matches('0').len().max(1);
    significant.div_ceil(2) + 1 + usize::from(negative)
}

/// Size in bytes of one attribute value in DynamoDB JSON (`{"S": "..."}`).
pub fn value_size(v: &Value) -> usize {
    let Some((kind, inner)) = v.as_object().and_then(|o| o.iter().next()) else { return 0 };
    match kind.as_str() {
        "S" => inner.as_str().map(str::len).unwrap_or(0),
        "N" => inner.as_str().map(number_size).unwrap_or(0),
        "B" => binary_size(inner),
        "BOOL" | "NULL" => 1,
        "SS" => inner.as_array().map(|a| a.iter().filter_map(Value::as_str).map(str::len).sum()).unwrap_or(0),
        "NS" => inner.as_array().map(|a| a.iter().filter_map(Value::as_str).map(number_size).sum()).unwrap_or(0),
        "BS" => inner.as_array().map(|a| a.iter().map(binary_size).sum()).unwrap_or(0),
        "L" => 3 + inner.as_array().map(|a| a.iter().map(|e| 1 + value_size(e)).sum()).unwrap_or(0),
        "M" => 3 + inner.as_object().map(|m| m.iter().map(|(k, e)| 1 + k.len() + value_size(e)).sum()).unwrap_or(0),
        _ => 0,
    }
}

fn binary_size(v: &Value) -> usize {
    v.as_str()
        .map(|b| base64::engine::general_purpose::STANDARD.decode(b).map(|d| d.len()).unwrap_or(b.len()))
        .unwrap_or(0)
}

/// Size in bytes of an item: every attribute's name plus its value.
pub fn item_size(item: &Map<String, Value>) -> usize {
    item.iter().map(|(k, v)| k.len() + value_size(v)).sum()
}

/// Write units for `bytes`: one per started KB (an empty write still costs one).
pub fn write_units(bytes: usize) -> u64 {
    bytes.div_ceil(KB).max(1) as u64
}

/// Read units for `bytes`: one per started 4 KB, half of that when eventually consistent.
pub fn read_units(bytes: usize, consistent: bool) -> f64 {
    let units = bytes.div_ceil(4 * KB).max(1) as f64;
    if consistent { units } else { units / 2.0 }
}

// ------------------------------------------------------------------ the tables, from template.yaml

#[derive(Debug, Clone, PartialEq)]
pub enum Projection {
    All,
    KeysOnly,
    Include(Vec<String>),
}

impl Projection {
    pub fn describe(&self) -> String {
        match self {
            Projection::All => "ALL".into(),
            Projection::KeysOnly => "KEYS_ONLY".into(),
            Projection::Include(a) => format!("INCLUDE {}", a.join(", ")),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Index {
    pub name: String,
    pub keys: Vec<String>,
    pub projection: Projection,
}

#[derive(Debug, Clone, Default)]
pub struct TableShape {
    pub keys: Vec<String>,
    pub indexes: Vec<Index>,
}

fn key_names(schema: Option<&Value>) -> Vec<String> {
    schema
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|k| k.get("AttributeName").and_then(Value::as_str).map(str::to_owned)).collect())
        .unwrap_or_default()
}

/// The key schema and GSIs of `logical_id` in template.yaml, as it is now.
pub fn table_shape(template: &Value, logical_id: &str) -> Result<TableShape> {
    let props = template
        .get("Resources")
        .and_then(|r| r.get(logical_id))
        .and_then(|r| r.get("Properties"))
        .ok_or_else(|| BenchError::Missing(format!("template.yaml: {logical_id}")))?;
    let indexes = props
        .get("GlobalSecondaryIndexes")
        .and_then(Value::as_array)
        .map(|gs| {
            gs.iter()
                .map(|g| {
                    let p = g.get("Projection");
                    let projection = match p.and_then(|p| p.get("ProjectionType")).and_then(Value::as_str) {
                        Some("KEYS_ONLY") => Projection::KeysOnly,
                        Some("INCLUDE") => Projection::Include(
                            p.and_then(|p| p.get("NonKeyAttributes"))
                                .and_then(Value::as_array)
                                .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
                                .unwrap_or_default(),
                        ),
                        _ => Projection::All,
                    };
                    Index {
                        name: g.get("IndexName").and_then(Value::as_str).unwrap_or_default().to_owned(),
                        keys: key_names(g.get("KeySchema")),
                        projection,
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(TableShape { keys: key_names(props.get("KeySchema")), indexes })
}

/// template.yaml as JSON (tags such as `!Ref` become one-key maps).
pub fn template_json() -> Result<Value> {
    let yaml = tocsin_harness::stack::load_template()?;
    Ok(serde_json::to_value(yaml)?)
}

impl Index {
    /// The item's entry in this index, if it is in it (sparse: every index key present).
    pub fn entry(&self, table_keys: &[String], item: &Map<String, Value>) -> Option<Map<String, Value>> {
        if !self.keys.iter().all(|k| item.contains_key(k)) {
            return None;
        }
        let keep = |name: &str| {
            table_keys.iter().any(|k| k == name)
                || self.keys.iter().any(|k| k == name)
                || match &self.projection {
                    Projection::All => true,
                    Projection::KeysOnly => false,
                    Projection::Include(a) => a.iter().any(|k| k == name),
                }
        };
        Some(item.iter().filter(|(k, _)| keep(k)).map(|(k, v)| (k.clone(), v.clone())).collect())
    }
}

/// One write to one index.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexWrite {
    pub index: String,
    /// put (entering), delete (leaving), delete+put (index key changed), update (projection changed).
    pub kind: &'static str,
    pub wru: u64,
    /// Entry size (the larger one, for an update; the put's for delete+put).
    pub bytes: usize,
}

/// The index writes a change of `before` into `after` makes (either may be absent).
pub fn index_writes(
    shape: &TableShape,
    before: Option<&Map<String, Value>>,
    after: Option<&Map<String, Value>>,
) -> Vec<IndexWrite> {
    let mut out = Vec::new();
    for ix in &shape.indexes {
        let b = before.and_then(|i| ix.entry(&shape.keys, i));
        let a = after.and_then(|i| ix.entry(&shape.keys, i));
        let size = |e: &Map<String, Value>| item_size(e) + INDEX_ENTRY_OVERHEAD;
        let w = |kind, wru, bytes| IndexWrite { index: ix.name.clone(), kind, wru, bytes };
        match (b, a) {
            (None, None) => {}
            (None, Some(a)) => out.push(w("put", write_units(size(&a)), size(&a))),
            (Some(b), None) => out.push(w("delete", write_units(size(&b)), size(&b))),
            (Some(b), Some(a)) => {
                let key_changed = ix.keys.iter().any(|k| b.get(k) != a.get(k));
                if key_changed {
                    out.push(w("delete+put", write_units(size(&b)) + write_units(size(&a)), size(&a)));
                } else if b != a {
                    let s = size(&b).max(size(&a));
                    out.push(w("update", write_units(s), s));
                }
            }
        }
    }
    out
}

// ------------------------------------------------------------------ update expressions

fn split_top(s: &str, sep: char) -> Vec<String> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            _ => {}
        }
        if c == sep && depth == 0 {
            parts.push(cur.trim().to_owned());
            cur.clear();
        } else {
            cur.push(c);
        }
    }
    if !cur.trim().is_empty() {
        parts.push(cur.trim().to_owned());
    }
    parts
}

/// The clauses of an update expression: (SET|REMOVE|ADD|DELETE, its text).
fn clauses(expr: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut depth = 0i32;
    for word in expr.split_whitespace() {
        let upper = word.to_ascii_uppercase();
        if depth == 0 && matches!(upper.as_str(), "SET" | "REMOVE" | "ADD" | "DELETE") {
            out.push((upper, String::new()));
            continue;
        }
        depth += word.matches('(').count() as i32 - word.matches(')').count() as i32;
        if let Some((_, text)) = out.last_mut() {
            text.push(' ');
            text.push_str(word);
        }
    }
    out
}

struct Ctx<'a> {
    names: Option<&'a Map<String, Value>>,
    values: Option<&'a Map<String, Value>>,
}

impl Ctx<'_> {
    fn name(&self, path: &str) -> String {
        let p = path.trim();
        if p.starts_with('#') {
            self.names.and_then(|n| n.get(p)).and_then(Value::as_str).unwrap_or(p).to_owned()
        } else {
            p.to_owned()
        }
    }
    fn operand(&self, item: &Map<String, Value>, text: &str) -> Result<Option<Value>> {
        let t = text.trim();
        if let Some(args) = t.strip_prefix("if_not_exists(").and_then(|r| r.strip_suffix(')')) {
            let a = split_top(args, ',');
            let (Some(path), Some(default)) = (a.first(), a.get(1)) else {
                return Err(unsupported(t));
            };
            return match item.get(&self.name(path)) {
                Some(v) => Ok(Some(v.clone())),
                None => self.operand(item, default),
            };
        }
        if t.starts_with(':') {
            return Ok(self.values.and_then(|v| v.get(t)).cloned());
        }
        if t.contains('(') || t.contains('.') || t.contains('[') {
            return Err(unsupported(t));
        }
        Ok(item.get(&self.name(t)).cloned())
    }
    fn value(&self, item: &Map<String, Value>, text: &str) -> Result<Option<Value>> {
        for op in ['+', '-'] {
            let parts = split_top(text, op);
            if parts.len() == 2 {
                let a = self.operand(item, &parts[0])?;
                let b = self.operand(item, &parts[1])?;
                let sign = if op == '+' { 1.0 } else { -1.0 };
                return Ok(Some(number(num(a.as_ref()) + sign * num(b.as_ref()))));
            }
        }
        self.operand(item, text)
    }
}

fn num(v: Option<&Value>) -> f64 {
    v.and_then(|v| v.get("N")).and_then(Value::as_str).and_then(|s| s.parse().ok()).unwrap_or(0.0)
}

fn number(x: f64) -> Value {
    let text = if x.fract() == 0.0 && x.abs() < 1e15 { format!("{}", x as i64) } else { format!("{x}") };
    serde_json::json!({ "N": text })
}

fn unsupported(what: &str) -> BenchError {
    BenchError::Process(format!("update expression not understood by the WRU bench: `{what}`"))
}

/// Applies an UpdateItem / transactional Update to `item` (created from `key` if absent).
pub fn apply_update(
    item: Option<Map<String, Value>>,
    key: &Map<String, Value>,
    req: &Value,
) -> Result<Map<String, Value>> {
    let mut item = item.unwrap_or_else(|| key.clone());
    let ctx = Ctx {
        names: req.get("ExpressionAttributeNames").and_then(Value::as_object),
        values: req.get("ExpressionAttributeValues").and_then(Value::as_object),
    };
    let expr = req.get("UpdateExpression").and_then(Value::as_str).unwrap_or_default();
    for (kind, text) in clauses(expr) {
        for action in split_top(&text, ',') {
            match kind.as_str() {
                "SET" => {
                    let Some((path, value)) = action.split_once('=') else { return Err(unsupported(&action)) };
                    let name = ctx.name(path);
                    match ctx.value(&item, value)? {
                        Some(v) => {
                            item.insert(name, v);
                        }
                        None => return Err(unsupported(&action)),
                    }
                }
                "REMOVE" => {
                    item.remove(&ctx.name(&action));
                }
                "ADD" => {
                    let mut words = action.split_whitespace();
                    let (Some(path), Some(val)) = (words.next(), words.next()) else {
                        return Err(unsupported(&action));
                    };
                    let name = ctx.name(path);
                    let add = ctx.operand(&item, val)?;
                    let sum = num(item.get(&name)) + num(add.as_ref());
                    item.insert(name, number(sum));
                }
                _ => return Err(unsupported(&action)),
            }
        }
    }
    Ok(item)
}

// ------------------------------------------------------------------ the recording

// (read with `Emulator::stop_recording_requests`)

// ------------------------------------------------------------------ one delivered alert

/// Table name → (key attribute values joined) → item.
type Images = HashMap<String, BTreeMap<String, Map<String, Value>>>;

fn key_of_item(keys: &[String], item: &Map<String, Value>) -> String {
    keys.iter().map(|k| item.get(k).map(|v| v.to_string()).unwrap_or_default()).collect::<Vec<_>>().join("|")
}

/// One write request's cost.
#[derive(Debug, Clone)]
pub struct WriteCost {
    pub function: &'static str,
    /// `PutItem`, `TransactWriteItems/Update`, …
    pub operation: String,
    /// The item written, by sort key with ids elided (`INTENT`, `OBS#…`, `MSG#…`).
    pub item: String,
    pub table: String,
    pub bytes_before: usize,
    pub bytes_after: usize,
    pub transactional: bool,
    pub table_wru: u64,
    pub index: Vec<IndexWrite>,
}

impl WriteCost {
    pub fn total(&self) -> u64 {
        self.table_wru + self.index.iter().map(|w| w.wru).sum::<u64>()
    }
}

/// One read request's cost (GetItem/BatchGetItem from the item images; Query counted as 1 RRU).
#[derive(Debug, Clone)]
pub struct ReadCost {
    pub function: &'static str,
    pub operation: String,
    pub rru: f64,
    /// Reads served by a GSI (a Query naming an index).
    pub index: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct PhaseFacts {
    pub function: &'static str,
    pub ops: BTreeMap<String, usize>,
    pub handler: Duration,
    /// Bytes of the function's own JSON log lines at the template's level (info), this alert.
    pub log_bytes: u64,
    pub log_lines: u64,
    /// Bytes of EMF metric lines this alert.
    pub emf_bytes: u64,
}

#[derive(Debug, Clone)]
pub struct Wru {
    pub writes: Vec<WriteCost>,
    pub reads: Vec<ReadCost>,
    pub phases: Vec<PhaseFacts>,
    pub indexes: Vec<Index>,
    /// Items whose computed image differs from the emulator's after a phase (should be empty).
    pub mismatches: Vec<String>,
    /// The delivery-status record SNS writes for the alert, or End User Messaging's largest event
    /// of it, bytes (as read from the log group).
    pub delivery_record_bytes: usize,
    /// How many records the provider wrote for the alert's SMS: SNS 1 (its delivery-status
    /// record), End User Messaging one per event (the carrier's acceptance, then the delivery).
    pub delivery_records: usize,
    /// The ledger items the alert leaves (their sizes; storage) and their number.
    pub stored_bytes: usize,
    pub stored_items: usize,
    pub final_state: String,
}

impl Wru {
    pub fn total(&self) -> u64 {
        self.writes.iter().map(WriteCost::total).sum()
    }
    pub fn of_function(&self, f: &str) -> u64 {
        self.writes.iter().filter(|w| w.function == f).map(WriteCost::total).sum()
    }
    pub fn of_index(&self, ix: &str) -> u64 {
        self.writes.iter().flat_map(|w| w.index.iter()).filter(|w| w.index == ix).map(|w| w.wru).sum()
    }
    pub fn table_wru(&self) -> u64 {
        self.writes.iter().map(|w| w.table_wru).sum()
    }
    pub fn rru(&self) -> f64 {
        self.reads.iter().map(|r| r.rru).sum()
    }
}

fn label(item: &Map<String, Value>) -> String {
    let sk = item.get("sk").and_then(|v| v.get("S")).and_then(Value::as_str).unwrap_or("?");
    match sk.split_once('#') {
        Some((prefix, _)) => format!("{prefix}#…"),
        None => sk.to_owned(),
    }
}

struct Applier<'a> {
    shapes: &'a HashMap<String, TableShape>,
    images: Images,
    /// (table, key) of every item written.
    written: Vec<(String, String)>,
}

impl Applier<'_> {
    fn shape(&self, table: &str) -> TableShape {
        self.shapes.get(table).cloned().unwrap_or_default()
    }

    fn write(
        &mut self,
        function: &'static str,
        operation: &str,
        table: &str,
        transactional: bool,
        change: impl FnOnce(Option<Map<String, Value>>) -> Result<Option<Map<String, Value>>>,
        key_item: &Map<String, Value>,
    ) -> Result<WriteCost> {
        let shape = self.shape(table);
        let key = key_of_item(&shape.keys, key_item);
        let before = self.images.get(table).and_then(|t| t.get(&key)).cloned();
        let after = change(before.clone())?;
        let bytes_before = before.as_ref().map(item_size).unwrap_or(0);
        let bytes_after = after.as_ref().map(item_size).unwrap_or(0);
        let base = write_units(bytes_before.max(bytes_after));
        let index = index_writes(&shape, before.as_ref(), after.as_ref());
        let shown = after.as_ref().or(before.as_ref()).map(label).unwrap_or_default();
        self.written.push((table.to_owned(), key.clone()));
        let t = self.images.entry(table.to_owned()).or_default();
        match after {
            Some(a) => {
                t.insert(key, a);
            }
            None => {
                t.remove(&key);
            }
        }
        Ok(WriteCost {
            function,
            operation: operation.to_owned(),
            item: shown,
            table: table.to_owned(),
            bytes_before,
            bytes_after,
            transactional,
            table_wru: if transactional { 2 * base } else { base },
            index,
        })
    }

    fn size_of(&self, table: &str, key: &Map<String, Value>) -> usize {
        let shape = self.shape(table);
        self.images.get(table).and_then(|t| t.get(&key_of_item(&shape.keys, key))).map(item_size).unwrap_or(0)
    }

    /// Applies one recorded request; returns its writes and reads.
    fn apply(&mut self, function: &'static str, r: &RecordedRequest) -> Result<(Vec<WriteCost>, Vec<ReadCost>)> {
        let op = r.operation.rsplit('.').next().unwrap_or_default();
        let b = &r.body;
        let table = |v: &Value| v.get("TableName").and_then(Value::as_str).unwrap_or_default().to_owned();
        let obj = |v: Option<&Value>| v.and_then(Value::as_object).cloned().unwrap_or_default();
        let mut writes = Vec::new();
        let mut reads = Vec::new();
        match op {
            "PutItem" => {
                let item = obj(b.get("Item"));
                let i2 = item.clone();
                writes.push(self.write(function, op, &table(b), false, |_| Ok(Some(i2)), &item)?);
            }
            "UpdateItem" => {
                let key = obj(b.get("Key"));
                let k2 = key.clone();
                let body = b.clone();
                writes.push(self.write(
                    function,
                    op,
                    &table(b),
                    false,
                    |i| apply_update(i, &k2, &body).map(Some),
                    &key,
                )?);
            }
            "DeleteItem" => {
                let key = obj(b.get("Key"));
                writes.push(self.write(function, op, &table(b), false, |_| Ok(None), &key)?);
            }
            "TransactWriteItems" => {
                for t in b.get("TransactItems").and_then(Value::as_array).into_iter().flatten() {
                    if let Some(p) = t.get("Put") {
                        let item = obj(p.get("Item"));
                        let i2 = item.clone();
                        writes.push(self.write(
                            function,
                            "TransactWriteItems/Put",
                            &table(p),
                            true,
                            |_| Ok(Some(i2)),
                            &item,
                        )?);
                    } else if let Some(u) = t.get("Update") {
                        let key = obj(u.get("Key"));
                        let k2 = key.clone();
                        let body = u.clone();
                        writes.push(self.write(
                            function,
                            "TransactWriteItems/Update",
                            &table(u),
                            true,
                            |i| apply_update(i, &k2, &body).map(Some),
                            &key,
                        )?);
                    } else if let Some(d) = t.get("Delete") {
                        let key = obj(d.get("Key"));
                        writes.push(self.write(
                            function,
                            "TransactWriteItems/Delete",
                            &table(d),
                            true,
                            |_| Ok(None),
                            &key,
                        )?);
                    } else if let Some(c) = t.get("ConditionCheck") {
                        let key = obj(c.get("Key"));
                        writes.push(self.write(
                            function,
                            "TransactWriteItems/ConditionCheck",
                            &table(c),
                            true,
                            Ok,
                            &key,
                        )?);
                    }
                }
            }
            "BatchWriteItem" => {
                for (tname, reqs) in b.get("RequestItems").and_then(Value::as_object).into_iter().flatten() {
                    for w in reqs.as_array().into_iter().flatten() {
                        if let Some(p) = w.get("PutRequest") {
                            let item = obj(p.get("Item"));
                            let i2 = item.clone();
                            writes.push(self.write(
                                function,
                                "BatchWriteItem/Put",
                                tname,
                                false,
                                |_| Ok(Some(i2)),
                                &item,
                            )?);
                        } else if let Some(d) = w.get("DeleteRequest") {
                            let key = obj(d.get("Key"));
                            writes.push(self.write(
                                function,
                                "BatchWriteItem/Delete",
                                tname,
                                false,
                                |_| Ok(None),
                                &key,
                            )?);
                        }
                    }
                }
            }
            "GetItem" => {
                let consistent = b.get("ConsistentRead").and_then(Value::as_bool).unwrap_or(false);
                let size = self.size_of(&table(b), &obj(b.get("Key")));
                reads.push(ReadCost { function, operation: op.into(), rru: read_units(size, consistent), index: None });
            }
            "BatchGetItem" => {
                for (tname, spec) in b.get("RequestItems").and_then(Value::as_object).into_iter().flatten() {
                    let consistent = spec.get("ConsistentRead").and_then(Value::as_bool).unwrap_or(false);
                    for k in spec.get("Keys").and_then(Value::as_array).into_iter().flatten() {
                        let size = self.size_of(tname, &obj(Some(k)));
                        reads.push(ReadCost {
                            function,
                            operation: op.into(),
                            rru: read_units(size, consistent),
                            index: None,
                        });
                    }
                }
            }
            "Query" | "Scan" => {
                let index = b.get("IndexName").and_then(Value::as_str).map(str::to_owned);
                reads.push(ReadCost { function, operation: op.into(), rru: 1.0, index });
            }
            _ => {}
        }
        Ok((writes, reads))
    }
}

/// Every item of `table` (a harness read, outside the recording).
async fn scan(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    keys: &[String],
) -> Result<BTreeMap<String, Map<String, Value>>> {
    let mut out = BTreeMap::new();
    let mut start = None;
    loop {
        let page = ddb
            .scan()
            .table_name(table)
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| BenchError::Aws("Scan", e.to_string()))?;
        for item in page.items() {
            let json: Map<String, Value> = item.iter().map(|(k, v)| (k.clone(), attr_json(v))).collect();
            out.insert(key_of_item(keys, &json), json);
        }
        start = page.last_evaluated_key().cloned();
        if start.is_none() {
            return Ok(out);
        }
    }
}

/// An SDK attribute value as DynamoDB JSON.
fn attr_json(v: &aws_sdk_dynamodb::types::AttributeValue) -> Value {
    use aws_sdk_dynamodb::types::AttributeValue as A;
    let b64 = |b: &aws_sdk_dynamodb::primitives::Blob| base64::engine::general_purpose::STANDARD.encode(b.as_ref());
    match v {
        A::S(s) => serde_json::json!({ "S": s }),
        A::N(n) => serde_json::json!({ "N": n }),
        A::B(b) => serde_json::json!({ "B": b64(b) }),
        A::Bool(b) => serde_json::json!({ "BOOL": b }),
        A::Null(b) => serde_json::json!({ "NULL": b }),
        A::Ss(s) => serde_json::json!({ "SS": s }),
        A::Ns(s) => serde_json::json!({ "NS": s }),
        A::Bs(s) => serde_json::json!({ "BS": s.iter().map(b64).collect::<Vec<_>>() }),
        A::L(l) => serde_json::json!({ "L": l.iter().map(attr_json).collect::<Vec<_>>() }),
        A::M(m) => {
            serde_json::json!({ "M": m.iter().map(|(k, v)| (k.clone(), attr_json(v))).collect::<Map<String, Value>>() })
        }
        _ => Value::Null,
    }
}

// ------------------------------------------------------------------ the functions' own logs

static LOG_BYTES: AtomicU64 = AtomicU64::new(0);
static LOG_LINES: AtomicU64 = AtomicU64::new(0);

/// Counts what the functions' log layer would print (nothing is printed).
#[derive(Clone, Copy)]
struct CountingWriter;

impl std::io::Write for CountingWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        LOG_BYTES.fetch_add(buf.len() as u64, Ordering::Relaxed);
        LOG_LINES.fetch_add(buf.iter().filter(|b| **b == b'\n').count() as u64, Ordering::Relaxed);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Installs the functions' own log layer (`tocsin::telemetry::json_logs`, at the template's
/// `RUST_LOG`) with a byte counter as its output, once per process.
pub(crate) fn count_logs(directive: &str) {
    let _ = subscriber::registry().with(tocsin::telemetry::json_logs(directive, || CountingWriter)).try_init();
}

/// The functions' log bytes and lines since the last call (what [`count_logs`] counted).
pub(crate) fn take_log_counts() -> (u64, u64) {
    (LOG_BYTES.swap(0, Ordering::Relaxed), LOG_LINES.swap(0, Ordering::Relaxed))
}

// ------------------------------------------------------------------ the measurement

struct Tables {
    ddb: aws_sdk_dynamodb::Client,
    shapes: HashMap<String, TableShape>,
}

impl Tables {
    async fn images(&self) -> Result<Images> {
        let mut out = Images::new();
        for (name, shape) in &self.shapes {
            out.insert(name.clone(), scan(&self.ddb, name, &shape.keys).await?);
        }
        Ok(out)
    }
}

struct Run<'a> {
    p: &'a Pipeline,
    tables: Tables,
    writes: Vec<WriteCost>,
    reads: Vec<ReadCost>,
    phases: Vec<PhaseFacts>,
    mismatches: Vec<String>,
    written: Vec<(String, String)>,
}

impl Run<'_> {
    async fn phase<F: std::future::Future>(&mut self, function: &'static str, f: F) -> Result<F::Output> {
        let images = self.tables.images().await?;
        let emf_before = tocsin_tests::emitted_metrics().len() as u64;
        LOG_BYTES.store(0, Ordering::Relaxed);
        LOG_LINES.store(0, Ordering::Relaxed);
        self.p.emulator.start_recording().await?;
        let started = Instant::now();
        let out = f.await;
        let handler = started.elapsed();
        // Operation names as the harness reads them (SNS's query protocol included).
        let recorded = self.p.emulator.stop_recording_requests().await?;
        let names: Vec<String> = recorded.iter().map(|r| r.operation.clone()).collect();
        let log_bytes = LOG_BYTES.load(Ordering::Relaxed);
        let log_lines = LOG_LINES.load(Ordering::Relaxed);
        let emf_bytes = (tocsin_tests::emitted_metrics().len() as u64).saturating_sub(emf_before);
        let mut ops = BTreeMap::new();
        // `Logs_…`: the harness reading the log group in place of the subscription.
        for n in names.into_iter().filter(|n| !n.starts_with("Logs_")) {
            *ops.entry(n).or_insert(0) += 1;
        }
        let mut applier = Applier { shapes: &self.tables.shapes, images, written: Vec::new() };
        for r in &recorded {
            let (w, rd) = applier.apply(function, r)?;
            self.writes.extend(w);
            self.reads.extend(rd);
        }
        let actual = self.tables.images().await?;
        for (table, items) in &actual {
            let computed = applier.images.get(table).cloned().unwrap_or_default();
            for (key, item) in items {
                match computed.get(key) {
                    Some(c) if item_size(c) == item_size(item) => {}
                    Some(c) => self.mismatches.push(format!(
                        "{function}: {} computed {} B, emulator {} B",
                        label(item),
                        item_size(c),
                        item_size(item)
                    )),
                    None => {
                        self.mismatches.push(format!("{function}: {} missing from the computed images", label(item)))
                    }
                }
            }
        }
        self.written.extend(applier.written);
        self.phases.push(PhaseFacts { function, ops, handler, log_bytes, log_lines, emf_bytes });
        Ok(out)
    }
}

/// One delivered alert (after a warm-up alert to the same number: an on-call phone's next alert,
/// its carrier already written) with every write's size and units, sent through
/// SNS. Storm mode off (the default, on, adds one send-log write: BENCHMARKS.md section 4b).
pub async fn measure() -> Result<Wru> {
    measure_with(tocsin_tests::Options::sns()).await
}

/// The same through AWS End User Messaging (the template's default provider): its carrier (the
/// local stand-in) writes the message's events into the stack's event group.
pub async fn measure_end_user_messaging() -> Result<Wru> {
    measure_with(tocsin_tests::Options::end_user_messaging()).await
}

async fn measure_with(mut options: tocsin_tests::Options) -> Result<Wru> {
    options.env.push(("TOCSIN_STORM_MODE", "off"));
    let p = Pipeline::start_with(options).await;
    let template = template_json()?;
    let directive = p
        .stack
        .function_env("SenderFunction")
        .ok()
        .and_then(|e| e.get("RUST_LOG").cloned())
        .unwrap_or_else(|| "info".to_owned());
    count_logs(&directive);
    let ledger_shape = table_shape(&template, "LedgerTable")?;
    let recipients_shape = table_shape(&template, "RecipientsTable")?;
    let indexes = ledger_shape.indexes.clone();
    let tables = Tables {
        ddb: aws_sdk_dynamodb::Client::new(&p.emulator.sdk_config().await),
        shapes: HashMap::from([
            (p.stack.table("LedgerTable").to_owned(), ledger_shape),
            (p.stack.table("RecipientsTable").to_owned(), recipients_shape),
        ]),
    };
    // Warm-up: connections, the emulator's caches (not measured).
    deliver(&p, None, "wru-warmup", "+14155553101").await?;
    let mut run = Run {
        p: &p,
        tables,
        writes: Vec::new(),
        reads: Vec::new(),
        phases: Vec::new(),
        mismatches: Vec::new(),
        written: Vec::new(),
    };
    let (key, record_bytes) = deliver(&p, Some(&mut run), "wru-measured", "+14155553101").await?;
    let final_state = format!("{:?}", p.record(&key).await.status.state);
    // What the alert leaves in the ledger: every item its writes touched, as they are now.
    let ledger = p.stack.table("LedgerTable").to_owned();
    let now = run.tables.images().await?;
    let mut kept: Vec<&(String, String)> = run.written.iter().filter(|(t, _)| *t == ledger).collect();
    kept.sort();
    kept.dedup();
    let stored: Vec<usize> =
        kept.iter().filter_map(|(t, k)| now.get(t).and_then(|items| items.get(k)).map(item_size)).collect();
    Ok(Wru {
        writes: run.writes,
        reads: run.reads,
        phases: run.phases,
        indexes,
        mismatches: run.mismatches,
        delivery_record_bytes: record_bytes.0,
        delivery_records: record_bytes.1,
        stored_bytes: stored.iter().sum(),
        stored_items: stored.len(),
        final_state,
    })
}

async fn deliver(
    p: &Pipeline,
    mut run: Option<&mut Run<'_>>,
    label: &str,
    recipient: &str,
) -> Result<(tocsin::domain::IdempotencyKey, (usize, usize))> {
    let body = alert(label, recipient);
    let (code, answer) = match run.as_deref_mut() {
        Some(r) => r.phase("intake", p.submit(&body)).await?,
        None => p.submit(&body).await,
    };
    if code != 201 {
        return Err(BenchError::Process(format!("intake answered {code}: {answer}")));
    }
    let key = key_of(&answer);
    let queue = p.stack.queue("SendQueue").clone();
    let msgs = p.receive(&queue.url, 10).await;
    let event = sqs_event(&queue.arn, &msgs);
    let handled = p.sender.handle(event, p.clock.invocation_deadline());
    let resp = match run.as_deref_mut() {
        Some(r) => r.phase("sender", handled).await?,
        None => handled.await,
    };
    if !resp.batch_item_failures.is_empty() {
        return Err(BenchError::Process(format!("sender reported failures: {:?}", resp.batch_item_failures)));
    }
    for m in &msgs {
        p.sqs
            .delete_message()
            .queue_url(&queue.url)
            .receipt_handle(m.receipt_handle.clone().unwrap_or_default())
            .send()
            .await
            .map_err(|e| BenchError::Aws("DeleteMessage", e.to_string()))?;
    }
    let message_id = p
        .record(&key)
        .await
        .status
        .sns_message_id
        .ok_or_else(|| BenchError::Process("the sender recorded no provider message id".into()))?;
    if !p.uses_end_user_messaging() {
        // Under End User Messaging the stand-in's carrier already wrote the message's events.
        p.carrier_reports(&message_id, recipient, true, "Message has been accepted by phone carrier").await;
    }
    let record_bytes = delivery_record_bytes(p, &message_id).await?;
    match run {
        Some(r) => {
            r.phase("status", p.run_status()).await?;
        }
        None => {
            p.run_status().await;
        }
    }
    Ok((key, record_bytes))
}

/// The delivery records of `message_id` as the provider wrote them: the largest one's message
/// bytes (SNS's success record, or End User Messaging's final event) and how many name it.
async fn delivery_record_bytes(p: &Pipeline, message_id: &str) -> Result<(usize, usize)> {
    let group = p.delivery_log_groups().into_iter().next().unwrap_or_default();
    let events = p
        .logs
        .filter_log_events()
        .log_group_name(&group)
        .send()
        .await
        .map_err(|e| BenchError::Aws("FilterLogEvents", e.to_string()))?;
    let sizes: Vec<usize> =
        events.events().iter().filter_map(|e| e.message()).filter(|m| m.contains(message_id)).map(str::len).collect();
    Ok((sizes.iter().copied().max().unwrap_or(0), sizes.len()))
}

/// A line for stderr while the bench runs.
pub fn summary_line(w: &Wru) -> String {
    format!("{} WRU per delivered alert over {} writes", w.total(), w.writes.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn item(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    // AWS, "Item sizes and formats": a string is its UTF-8 bytes, the name counts too.
    #[test]
    fn a_string_attribute_is_its_name_plus_its_utf8_bytes() {
        assert_eq!(item_size(&item(json!({"pk": {"S": "abc"}}))), 5);
        assert_eq!(item_size(&item(json!({"n": {"S": "é€"}}))), 1 + 2 + 3);
    }

    // AWS: numbers are ⌈significant digits ÷ 2⌉ + 1 bytes; leading and trailing zeros do not count.
    #[test]
    fn numbers_cost_one_byte_per_two_significant_digits_plus_one() {
        assert_eq!(number_size("1"), 2);
        assert_eq!(number_size("12"), 2);
        assert_eq!(number_size("123"), 3);
        assert_eq!(number_size("1700000000"), 2); // trailing zeros trimmed: "17"
        assert_eq!(number_size("1764505200123"), 8); // 13 digits → 7 + 1
        assert_eq!(number_size("0.000123"), 3);
        assert_eq!(number_size("-5"), 3);
    }

    // AWS: booleans and nulls 1 byte; lists/maps 3 bytes + 1 per element.
    #[test]
    fn booleans_nulls_and_documents() {
        assert_eq!(value_size(&json!({"BOOL": true})), 1);
        assert_eq!(value_size(&json!({"NULL": true})), 1);
        assert_eq!(value_size(&json!({"L": []})), 3);
        assert_eq!(value_size(&json!({"M": {}})), 3);
        assert_eq!(value_size(&json!({"L": [{"S": "ab"}, {"N": "1"}]})), 3 + (1 + 2) + (1 + 2));
        assert_eq!(value_size(&json!({"M": {"a": {"S": "xy"}}})), 3 + 1 + 1 + 2);
        assert_eq!(value_size(&json!({"SS": ["a", "bc"]})), 3);
        assert_eq!(value_size(&json!({"B": "AAEC"})), 3); // 3 bytes, base64
    }

    // AWS (capacity modes): a 500-byte item is 1 WRU, a 3.5 KB one 4; reads per 4 KB, halved
    // when eventually consistent.
    #[test]
    fn units_per_started_kilobyte_and_four_kilobytes() {
        assert_eq!(write_units(500), 1);
        assert_eq!(write_units(1024), 1);
        assert_eq!(write_units(1025), 2);
        assert_eq!(write_units(3584), 4);
        assert_eq!(write_units(0), 1);
        assert_eq!(read_units(3584, true), 1.0);
        assert_eq!(read_units(3584, false), 0.5);
        assert_eq!(read_units(4097, true), 2.0);
    }

    fn shape() -> TableShape {
        TableShape {
            keys: vec!["pk".into(), "sk".into()],
            indexes: vec![Index {
                name: "due-index".into(),
                keys: vec!["due_shard".into(), "due_at".into()],
                projection: Projection::Include(vec!["state".into()]),
            }],
        }
    }

    #[test]
    fn sparse_index_entry_holds_keys_and_projection_plus_overhead() {
        let i = item(json!({"pk": {"S": "a"}, "sk": {"S": "b"}, "due_shard": {"S": "due#1"}, "due_at": {"N": "12"},
                            "state": {"S": "queued"}, "intent": {"S": "xxxxxxxxxx"}}));
        let s = shape();
        let entry = s.indexes[0].entry(&s.keys, &i).map(|e| item_size(&e));
        assert_eq!(entry, Some(3 + 3 + 14 + 8 + 11));
        let w = index_writes(&s, None, Some(&i));
        assert_eq!(w, vec![IndexWrite { index: "due-index".into(), kind: "put", wru: 1, bytes: 39 + 100 }]);
        assert_eq!(index_writes(&s, Some(&i), None)[0].kind, "delete");
        let mut moved = i.clone();
        moved.insert("due_at".into(), json!({"N": "99"}));
        assert_eq!(index_writes(&s, Some(&i), Some(&moved))[0].wru, 2);
        let mut unprojected = i.clone();
        unprojected.insert("intent".into(), json!({"S": "y"}));
        assert!(index_writes(&s, Some(&i), Some(&unprojected)).is_empty());
        let mut projected = i.clone();
        projected.insert("state".into(), json!({"S": "sending"}));
        assert_eq!(index_writes(&s, Some(&i), Some(&projected))[0].kind, "update");
        let bare = item(json!({"pk": {"S": "a"}, "sk": {"S": "b"}}));
        assert!(index_writes(&s, Some(&bare), Some(&bare)).is_empty());
    }

    #[test]
    fn update_expressions_as_the_ledger_writes_them() {
        let key = item(json!({"pk": {"S": "a"}, "sk": {"S": "INTENT"}}));
        let mut before = key.clone();
        before.insert("due_home".into(), json!({"S": "due#3"}));
        before.insert("gone".into(), json!({"S": "x"}));
        let req = json!({
            "UpdateExpression": "SET #state = :state, #attempts = if_not_exists(#attempts, :zero) + :one, #due_shard = if_not_exists(#due_home, :legacy_shard) REMOVE #gone",
            "ExpressionAttributeNames": {"#state": "state", "#attempts": "attempts", "#due_shard": "due_shard", "#due_home": "due_home", "#gone": "gone"},
            "ExpressionAttributeValues": {":state": {"S": "sending"}, ":zero": {"N": "0"}, ":one": {"N": "1"}, ":legacy_shard": {"S": "due"}}
        });
        let after = apply_update(Some(before), &key, &req).ok().unwrap_or_default();
        assert_eq!(after.get("state"), Some(&json!({"S": "sending"})));
        assert_eq!(after.get("attempts"), Some(&json!({"N": "1"})));
        assert_eq!(after.get("due_shard"), Some(&json!({"S": "due#3"})));
        assert!(!after.contains_key("gone"));
        let bad = json!({"UpdateExpression": "SET a = list_append(a, :x)"});
        assert!(apply_update(None, &key, &bad).is_err());
    }

    #[test]
    fn projections_are_read_from_the_template() {
        let t = json!({"Resources": {"T": {"Properties": {
            "KeySchema": [{"AttributeName": "pk"}, {"AttributeName": "sk"}],
            "GlobalSecondaryIndexes": [
                {"IndexName": "a", "KeySchema": [{"AttributeName": "x"}], "Projection": {"ProjectionType": "ALL"}},
                {"IndexName": "b", "KeySchema": [{"AttributeName": "y"}],
                 "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": ["state"]}}]}}}});
        let s = table_shape(&t, "T").ok().unwrap_or_default();
        assert_eq!(s.keys, vec!["pk", "sk"]);
        assert_eq!(s.indexes[0].projection, Projection::All);
        assert_eq!(s.indexes[1].projection, Projection::Include(vec!["state".into()]));
    }
}
