//! A partial run (`TOCSIN_BENCH_SECTIONS`) rewrites BENCHMARKS.md without losing the sections it
//! did not measure: each `## ` section the new render left without a table is taken from the
//! previous file, and the summary keeps the previous rows of measurements not re-run. Any run,
//! partial or full, keeps the sections this command does not write at all (the simulation's long
//! runs, written by hand; the carrier month, written by `--bin carriers`).

fn blocks(text: &str) -> (String, Vec<(String, String)>) {
    let mut preamble = String::new();
    let mut out: Vec<(String, String)> = Vec::new();
    for line in text.split_inclusive('\n') {
        if line.starts_with("## ") {
            out.push((line.trim_end().to_owned(), line.to_owned()));
        } else if let Some((_, body)) = out.last_mut() {
            body.push_str(line);
        } else {
            preamble.push_str(line);
        }
    }
    (preamble, out)
}

fn has_table(block: &str) -> bool {
    block.lines().any(|l| l.starts_with("|---"))
}

fn first_cell(row: &str) -> Option<&str> {
    let row = row.trim();
    if !row.starts_with('|') || row.starts_with("|---") {
        return None;
    }
    row.split('|').nth(1).map(str::trim)
}

fn merge_summary(old: &str, new: &str) -> String {
    let new_rows: Vec<&str> = new.lines().filter(|l| first_cell(l).is_some()).collect();
    let old_rows: Vec<&str> = old.lines().filter(|l| first_cell(l).is_some()).collect();
    let mut rows: Vec<&str> = Vec::new();
    for o in &old_rows {
        match new_rows.iter().find(|n| first_cell(n) == first_cell(o)) {
            Some(n) => rows.push(n),
            None => rows.push(o),
        }
    }
    for n in &new_rows {
        if !rows.iter().any(|r| first_cell(r) == first_cell(n)) {
            rows.push(n);
        }
    }
    let head: String = new.lines().take_while(|l| !l.starts_with('|')).map(|l| format!("{l}\n")).collect();
    let mut out = head;
    let mut table = rows.iter().take(1).map(|r| format!("{r}\n")).collect::<String>();
    table.push_str("|---|---|---|---|\n");
    for r in rows.iter().skip(1) {
        table.push_str(r);
        table.push('\n');
    }
    out.push_str(&table);
    out.push('\n');
    out
}

/// `new` with every table-less section replaced by `old`'s section of the same heading.
pub fn merge(old: &str, new: &str, note: &str) -> String {
    let (preamble, new_blocks) = blocks(new);
    let (_, old_blocks) = blocks(old);
    let mut out = preamble;
    for (heading, body) in &new_blocks {
        let previous = old_blocks.iter().find(|(h, _)| h == heading).map(|(_, b)| b.as_str());
        if heading == "## Summary" {
            out.push_str(note);
            match previous {
                Some(p) => out.push_str(&merge_summary(p, body)),
                None => out.push_str(body),
            }
        } else if !has_table(body)
            && let Some(p) = previous
        {
            out.push_str(p);
        } else {
            out.push_str(body);
        }
    }
    carry_over(old, out)
}

/// `new` followed by the sections of `old` whose heading `new` does not have, in their order.
pub fn carry_over(old: &str, new: String) -> String {
    let (_, new_blocks) = blocks(&new);
    let (_, old_blocks) = blocks(old);
    let mut out = new;
    for (heading, body) in &old_blocks {
        if !new_blocks.iter().any(|(h, _)| h == heading) {
            if !out.ends_with("\n\n") {
                out.push('\n');
            }
            out.push_str(body);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_not_rerun_are_kept_and_summary_rows_merged() {
        let old = "# B\n\n## Summary\n\n| m | t | r | v |\n|---|---|---|---|\n| 1. a | x | old | met |\n| 2. b | x | old | met |\n\n## 1. A\n\n| a |\n|---|\n| 1 |\n\n## 2. B\n\n| b |\n|---|\n| 2 |\n";
        let new = "# B\n\n## Summary\n\n| m | t | r | v |\n|---|---|---|---|\n| 2. b | x | new | met |\n\n## 1. A\n\nmethod only\n\n## 2. B\n\n| b |\n|---|\n| 3 |\n";
        let m = merge(old, new, "> note\n\n");
        assert!(m.contains("| 1 |"), "{m}");
        assert!(m.contains("| 3 |") && !m.contains("| 2 |\n"), "{m}");
        assert!(m.contains("| 1. a | x | old | met |") && m.contains("| 2. b | x | new | met |"), "{m}");
        assert!(m.contains("> note") && !m.contains("method only"), "{m}");
    }

    #[test]
    fn sections_this_command_does_not_write_are_kept_after_its_own() {
        let old =
            "# B\n\n## 1. A\n\n| a |\n|---|\n| 1 |\n\n## 10. Sim\n\nlong runs\n\n## 11. Month\n\n| m |\n|---|\n| 9 |\n";
        let new = "# B\n\n## 1. A\n\n| a |\n|---|\n| 2 |\n".to_owned();
        let kept = carry_over(old, new);
        assert_eq!(
            kept,
            "# B\n\n## 1. A\n\n| a |\n|---|\n| 2 |\n\n## 10. Sim\n\nlong runs\n\n## 11. Month\n\n| m |\n|---|\n| 9 |\n"
        );
        let merged = merge(old, "# B\n\n## 1. A\n\nmethod only\n", "");
        assert!(merged.contains("| 1 |") && merged.contains("long runs") && merged.contains("| 9 |"), "{merged}");
    }
}
