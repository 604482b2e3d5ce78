//! Cost of FindFiles over `.gitignore` files a command planted: the
//! service's CPU time and peak RSS for one call (or PAR at once). A
//! measurement, not a test: it asserts nothing and is ignored by default.
//!
//! ```text
//! LINE=light RULES=30000 cargo test --release --test walk_cost -- --ignored --nocapture
//! LINE=heavy RULES=3000 FILES=3 PAR=4 cargo test --release --test walk_cost -- --ignored --nocapture
//! ```
//!
//! RULES rules split over FILES nested `.gitignore` files; LINE=light
//! writes `*.generated-N-artifact.tmp` lines (30,000 make ~1 MB), heavy
//! writes `**/buildN/*.tmp`. The numbers are the whole test process's, the
//! server being in-process; the peak is a high-water mark. So it has a
//! binary of its own: no other test may run in the process it measures.

// Public: this binary uses only part of the shared support (the `it`
// binary checks that all of it is used).
#[path = "it/common/mod.rs"]
pub mod common;

use common::TestServer;
use sandboxd::pb;

/// (CPU seconds of this process, its peak RSS in KiB), from /proc.
fn usage() -> (f64, i64) {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    // utime and stime (fields 14 and 15 of stat(5)), in clock ticks of 1/100 s.
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let peak = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .unwrap()
        .parse()
        .unwrap();
    (ticks / 100.0, peak)
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run it with --ignored --nocapture"]
async fn find_files_cost_over_planted_gitignore_files() {
    let rules = env("RULES", 30_000);
    let files = env("FILES", 1);
    let par = env("PAR", 1);
    let srv = TestServer::start().await;
    let (sid, ws) = srv.session().await;
    // `files` nested ignore files, rules split evenly; 1 MB for 30k rules.
    let mut dir = ws.clone();
    for f in 0..files {
        let text: String = (0..rules / files)
            .map(|i| {
                if std::env::var("LINE").as_deref() == Ok("light") {
                    format!("*.generated-{f}-{i:05}-artifact.tmp\n")
                } else {
                    format!("**/build{f}x{i:05}/*.tmp\n")
                }
            })
            .collect();
        std::fs::write(dir.join(".gitignore"), &text).unwrap();
        if f == 0 {
            eprintln!("first .gitignore: {} bytes", text.len());
        }
        for i in 0..20 {
            std::fs::write(dir.join(format!("f{i}.rs")), "fn main() {}\n").unwrap();
        }
        dir = dir.join("sub");
        std::fs::create_dir(&dir).unwrap();
    }
    let (cpu0, rss0) = usage();
    let t = std::time::Instant::now();
    let mut calls = Vec::new();
    for _ in 0..par {
        let mut c = srv.client.clone();
        let sid = sid.clone();
        calls.push(tokio::spawn(async move {
            c.find_files(pb::FindFilesRequest {
                session_id: sid,
                pattern: "*.rs".into(),
                path: String::new(),
                limit: 0,
            })
            .await
        }));
    }
    for c in calls {
        match c.await.unwrap() {
            Ok(r) => eprintln!("ok: {} paths", r.into_inner().paths.len()),
            Err(e) => eprintln!("refused: {:?} {}", e.code(), e.message()),
        }
    }
    let (cpu1, rss1) = usage();
    eprintln!(
        "MEASURE rules={rules} files={files} par={par}: wall {:.3} s, cpu {:.3} s, peak RSS {} MB (before the call {} MB, +{} MB)",
        t.elapsed().as_secs_f64(),
        cpu1 - cpu0,
        rss1 / 1024,
        rss0 / 1024,
        (rss1 - rss0) / 1024
    );
    srv.stop().await;
}
