//! The report: the table rendered in full, or merged into the rows of an
//! earlier one, with the machine it was measured on.

use std::fmt::Write as _;
use std::process::Command;

use super::{Row, Section};

/// The machine: cores, CPU, kernel and Docker Engine.
fn machine() -> String {
    let cmd = |prog: &str, args: &[&str]| {
        Command::new(prog)
            .args(args)
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("model name\t: ").map(str::to_string))
        })
        .unwrap_or_default();
    format!(
        "{} cores ({cpu}), kernel {}, Docker Engine {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        cmd("uname", &["-r"]),
        cmd(
            "docker",
            &[
                "version",
                "--format",
                "{{.Server.Version}} (API {{.Server.APIVersion}})"
            ]
        ),
    )
}

/// `old` with the table rows of `rows`' figures replaced (or added at the
/// table's end), everything else as it was.
pub(super) fn merge(old: &str, rows: &[Row]) -> String {
    let line = |r: &Row| {
        format!(
            "| {} | {} | {} | {} | {} |",
            r.figure, r.ours, r.baseline, r.ratio, r.target
        )
    };
    let mut lines: Vec<String> = old.lines().map(str::to_string).collect();
    // The first table is the figures'.
    let start = lines.iter().position(|l| l.starts_with("| figure |"));
    let end = start.map(|s| s + lines[s..].iter().take_while(|l| l.starts_with('|')).count());
    let (Some(start), Some(mut end)) = (start, end) else {
        return render(rows);
    };
    for r in rows {
        let head = format!("| {} |", r.figure);
        match lines[start..end].iter().position(|l| l.starts_with(&head)) {
            Some(i) => lines[start + i] = line(r),
            None => {
                lines.insert(end, line(r));
                end += 1;
            }
        }
    }
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

/// `doc` with the section `s` in place of its earlier text, or, new, right
/// after the table (before the hand-written sections).
pub(super) fn put_section(doc: &str, s: &Section) -> String {
    let head = format!("\n## {}\n", s.heading);
    let block = format!("{head}\n{}", s.body);
    let (start, end) = match doc.find(&head) {
        Some(at) => {
            let after = at + head.len();
            let end = doc[after..].find("\n## ").map_or(doc.len(), |e| after + e);
            (at, end)
        }
        None => {
            let at = doc.find("\n## ").unwrap_or(doc.len());
            (at, at)
        }
    };
    let mut out = doc[..start].trim_end_matches('\n').to_string();
    out.push('\n');
    out.push_str(&block);
    out.push_str(&doc[end..]);
    out
}

/// The whole report: title, machine, how it is made, and the table.
pub(super) fn render(rows: &[Row]) -> String {
    let mut out = String::new();
    let date = Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let _ = writeln!(out, "# sandboxd benchmarks\n");
    let _ = writeln!(out, "Measured {date} on {}.", machine());
    let _ = writeln!(
        out,
        "Reproduce with `cargo run --release -- bench`. Baselines run in the same process, alternating \
         sample by sample with sandboxd's (round-trip samples each start after the same 25 ms pause, so \
         Docker's leftover bookkeeping from one sample does not land on the next); each figure starts with \
         the warm pool full; figures are p50 / p90 / p99 unless stated.\n"
    );
    let _ = writeln!(
        out,
        "| figure | sandboxd | baseline (same run) | ratio | target |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|");
    for r in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} |",
            r.figure, r.ours, r.baseline, r.ratio, r.target
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(body: &str) -> Section {
        Section {
            heading: "Gen".into(),
            body: body.into(),
        }
    }

    #[test]
    fn a_new_section_goes_after_the_table_and_a_known_one_is_replaced() {
        let doc = "# T\n\n| figure |\n|---|\n\n## Old\n\nkept\n";
        let once = put_section(doc, &section("one\n"));
        assert_eq!(
            once,
            "# T\n\n| figure |\n|---|\n\n## Gen\n\none\n\n## Old\n\nkept\n"
        );
        let twice = put_section(&once, &section("two\n"));
        assert_eq!(
            twice,
            "# T\n\n| figure |\n|---|\n\n## Gen\n\ntwo\n\n## Old\n\nkept\n"
        );
        let last = put_section("# T\n\n| figure |\n", &section("x\n"));
        assert_eq!(last, "# T\n\n| figure |\n\n## Gen\n\nx\n");
        assert_eq!(
            put_section(&last, &section("y\n")),
            "# T\n\n| figure |\n\n## Gen\n\ny\n"
        );
    }
}
