//! EditFile of one snippet in files of growing size, against the floor of
//! any atomic edit (read, write a copy, fsync, rename).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use sandboxd::pb;

use super::{AnyError, Client, Row, close, ms, new_session, stats, verdict};

/// The edit rows.
pub(super) async fn edits(client: &Client, n: usize, rows: &mut Vec<Row>) -> Result<(), AnyError> {
    eprintln!("edits ({n} samples per size)...");
    let session = new_session(client).await?;
    let ws = PathBuf::from(&session.workspace_path);
    let mut per_mb = Vec::new();
    for (label, size) in [
        ("1 KB", 1usize << 10),
        ("100 KB", 100 << 10),
        ("1 MB", 1 << 20),
        ("10 MB", 10 << 20),
    ] {
        let line = "let value = compute(input, 42); // filler text for the benchmark\n";
        let mut text = String::with_capacity(size + 64);
        text.push_str("MARKER_A\n");
        while text.len() < size {
            text.push_str(line);
        }
        let name = format!("f{size}.txt");
        std::fs::write(ws.join(&name), &text)?;
        let (mut ours, mut floor) = (Vec::new(), Vec::new());
        for i in 0..n {
            let (old, new) = if i % 2 == 0 {
                ("MARKER_A", "MARKER_B")
            } else {
                ("MARKER_B", "MARKER_A")
            };
            let t = Instant::now();
            client
                .clone()
                .edit_file(pb::EditFileRequest {
                    session_id: session.session_id.clone(),
                    path: name.clone(),
                    edits: vec![pb::Edit {
                        old_string: old.into(),
                        new_string: new.into(),
                        replace_all: false,
                    }],
                    expected_sha256: String::new(),
                })
                .await?;
            ours.push(t.elapsed());
            // The floor of any atomic edit: read, write a copy, fsync, rename.
            let (src, tmp) = (ws.join(&name), ws.join(format!(".{name}.floor")));
            let t = Instant::now();
            tokio::task::spawn_blocking(move || -> std::io::Result<()> {
                let bytes = std::fs::read(&src)?;
                let f = std::fs::File::create(&tmp)?;
                std::io::Write::write_all(&mut &f, &bytes)?;
                f.sync_all()?;
                std::fs::remove_file(&tmp)
            })
            .await??;
            floor.push(t.elapsed());
        }
        let (o, f) = (stats(&ours), stats(&floor));
        per_mb.push(o.p50.as_secs_f64() * 1000.0 / (size as f64 / (1 << 20) as f64));
        let target = if size == 1 << 20 {
            verdict(o.p50 <= Duration::from_millis(5), "p50 <= 5 ms")
        } else {
            String::new()
        };
        rows.push(Row {
            figure: format!("EditFile, one snippet, {label} file"),
            ours: format!("{} / {} / {}", ms(o.p50), ms(o.p90), ms(o.p99)),
            baseline: format!("read + write + fsync {}", ms(f.p50)),
            ratio: format!("{:.2}x", o.p50.as_secs_f64() / f.p50.as_secs_f64()),
            target,
        });
    }
    rows.push(Row {
        figure: "EditFile cost per MB (1 MB vs 10 MB file)".into(),
        ours: format!("{:.2} ms/MB vs {:.2} ms/MB", per_mb[2], per_mb[3]),
        baseline: String::new(),
        ratio: format!("{:.2}x", per_mb[3] / per_mb[2]),
        target: verdict(
            per_mb[3] <= per_mb[2] * 1.5,
            "linear in size (10 MB per-MB cost <= 1.5x 1 MB's)",
        ),
    });
    close(client, session.session_id).await?;
    Ok(())
}
