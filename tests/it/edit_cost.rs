//! Cost of one EditFile call on a 10 MB file at the engine's bounds (100
//! edits, 100,000 sites): medians of 5 runs. A measurement, not a test: it
//! asserts nothing and is ignored by default.
//!
//! ```text
//! cargo test --release --test it edit_cost -- --ignored --nocapture
//! ```

use std::time::Instant;

use sandboxd::workspace::edit::{EditSpec, apply};

const TEN_MB: usize = 10 * 1024 * 1024;

fn spec(old: String, new: &str, replace_all: bool) -> EditSpec {
    EditSpec {
        old,
        new: new.into(),
        replace_all,
    }
}

fn median_of_five(label: &str, bytes: &[u8], edits: &[EditSpec]) {
    let mut runs = Vec::new();
    let mut outcome = String::new();
    for _ in 0..5 {
        let started = Instant::now();
        let result = apply(bytes, edits, "f", TEN_MB as u64);
        runs.push(started.elapsed().as_secs_f64());
        outcome = match result {
            Ok(a) => format!("accepted, {} replacements", a.replacements),
            Err(e) => format!("refused: {e}"),
        };
    }
    runs.sort_by(f64::total_cmp);
    eprintln!("MEASURE {label}: median {:.3} s ({outcome})", runs[2]);
}

/// A unique word of common letters only, so memmem's rare-byte prefilter
/// finds candidates everywhere.
fn word(i: usize) -> String {
    let letters = b"etaoin";
    (0..7)
        .map(|k| letters[(i / 6usize.pow(k)) % 6] as char)
        .collect()
}

#[test]
#[ignore = "a measurement: run it with --ignored --nocapture"]
fn edit_cost_at_the_engine_bounds() {
    let body = TEN_MB - 4096;
    let mut end_sites = "a".repeat(body);
    for i in 0..100 {
        end_sites.push_str(&format!("\n{}\n", word(i * 7 + 1)));
    }
    let edits: Vec<_> = (0..100)
        .map(|i| spec(format!("\n{}\n", word(i * 7 + 1)), "\nX\n", false))
        .collect();
    median_of_five(
        "100 unique edits, sites at the end of 10 MB",
        end_sites.as_bytes(),
        &edits,
    );

    let mut start_sites: String = (0..100).map(|i| format!("{}\n", word(i * 7 + 1))).collect();
    start_sites.push_str(&"etaoin ".repeat(body / 7));
    let edits: Vec<_> = (0..100)
        .map(|i| spec(format!("{}\n", word(i * 7 + 1)), "X\n", false))
        .collect();
    median_of_five(
        "100 unique edits, sites at the start of 10 MB",
        start_sites.as_bytes(),
        &edits,
    );

    // Periodic needles over a periodic text: the searcher's slowest case.
    let periodic = format!("{}b", "ab".repeat(body / 2));
    let edits: Vec<_> = (0..100)
        .map(|i| spec(format!("{}b", "ab".repeat(50 + i)), "X", false))
        .collect();
    median_of_five(
        "100 periodic edits over 10 MB of \"ab\"",
        periodic.as_bytes(),
        &edits,
    );

    let all_a = "a".repeat(body);
    median_of_five(
        "replace_all \"a\" over 10 MB of \"a\"",
        all_a.as_bytes(),
        &[spec("a".into(), "b", true)],
    );
    let capped = format!("{}{}", "ab".repeat(100_000), "c".repeat(body - 200_000));
    median_of_five(
        "replace_all \"a\" at exactly 100,000 sites",
        capped.as_bytes(),
        &[spec("a".into(), "x", true)],
    );
    median_of_five(
        "ambiguous 4 KiB periodic old_string over 10 MB",
        all_a.as_bytes(),
        &[spec("a".repeat(4096), "b", false)],
    );
    median_of_five(
        "100 identical replace_all \"a\" over 10 MB",
        all_a.as_bytes(),
        &vec![spec("a".into(), "b", true); 100],
    );
}
