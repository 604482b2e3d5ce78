//! Figures of workspaces in and out (a 100 MB tree of 10,000 files): an
//! upload against `tar -x` of the same archive, a download against
//! `tar -c` of the same tree, checkpoints and restores against `cp -a`, and
//! the changes after 10 edited files against `git diff` of the same edits.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sandboxd::pb;

use super::workspace_calls::{checkpoint, download, restore, upload};
use super::{AnyError, Client, Row, close, ms, run_cmd, stats, verdict};

/// Files in the tree.
const FILES: usize = 10_000;
/// Bytes per file (10,000 of them: 100 MB).
const FILE_BYTES: usize = 10_000;

/// Writes the tree: 100 directories of 100 text files, each 10 KB of
/// lines that differ from file to file (so nothing is deduplicated).
fn make_tree(root: &Path) -> std::io::Result<()> {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for d in 0..FILES / 100 {
        let dir = root.join(format!("pkg{d:03}"));
        std::fs::create_dir_all(&dir)?;
        for f in 0..100 {
            let mut text = String::with_capacity(FILE_BYTES + 80);
            let mut line = 0;
            while text.len() < FILE_BYTES {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                text.push_str(&format!(
                    "line {line}: value = {seed:016x} # module {d} file {f}\n"
                ));
                line += 1;
            }
            std::fs::write(dir.join(format!("mod{f:03}.py")), &text)?;
        }
    }
    Ok(())
}

fn secs(d: Duration) -> String {
    if d >= Duration::from_secs(1) {
        format!("{:.2} s", d.as_secs_f64())
    } else {
        ms(d)
    }
}

fn mb_per_s(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / 1e6 / d.as_secs_f64()
}

/// Runs `cmd` with `input` on stdin, draining its stdout; returns how
/// long it took.
fn timed(cmd: &mut Command, input: Option<&[u8]>) -> Result<Duration, AnyError> {
    let t = Instant::now();
    let mut child = cmd
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let mut stdin = child.stdin.take();
    let mut stdout = child.stdout.take().ok_or("no stdout")?;
    let drain = std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = stdout.read_to_end(&mut sink);
        sink.len()
    });
    if let (Some(s), Some(bytes)) = (stdin.as_mut(), input) {
        s.write_all(bytes)?;
    }
    drop(stdin);
    let status = child.wait()?;
    drain.join().map_err(|_| "drain thread")?;
    if !status.success() {
        return Err(format!("{cmd:?} failed: {status}").into());
    }
    Ok(t.elapsed())
}

/// Edits line 3 of 10 files (`round` picks which), through EditFile and
/// in the git copy alike.
async fn edit_ten(
    client: &Client,
    sid: &str,
    ws: &Path,
    copy: &Path,
    round: usize,
) -> Result<(), AnyError> {
    for k in 0..10 {
        let rel = format!("pkg{:03}/mod{:03}.py", (round * 10 + k) % 100, round % 100);
        let text = std::fs::read_to_string(ws.join(&rel))?;
        let old = text.lines().nth(2).ok_or("short file")?.to_string();
        let new = format!("{old} # edited");
        client
            .clone()
            .edit_file(pb::EditFileRequest {
                session_id: sid.into(),
                path: rel.clone(),
                edits: vec![pb::Edit {
                    old_string: old,
                    new_string: new,
                    replace_all: false,
                }],
                expected_sha256: String::new(),
            })
            .await?;
        std::fs::copy(ws.join(&rel), copy.join(&rel))?;
    }
    Ok(())
}

/// The figures; `n` samples each.
pub async fn figures(client: &Client, n: usize, rows: &mut Vec<Row>) -> Result<(), AnyError> {
    eprintln!("workspaces in and out ({n} samples each)...");
    let scratch = tempfile::tempdir()?;
    let tree = scratch.path().join("tree");
    make_tree(&tree)?;
    let archive = {
        let out = Command::new("tar")
            .args(["-cf", "-", "-C"])
            .arg(&tree)
            .arg(".")
            .output()?;
        out.stdout
    };
    let total = FILES * FILE_BYTES;

    // Upload, against tar -x of the same archive into a local directory.
    let (mut up, mut untar, mut untar_same) = (Vec::new(), Vec::new(), Vec::new());
    let mut kept = None;
    for i in 0..n {
        let s = super::new_session(client).await?;
        up.push(upload(client, &s.session_id, &archive).await?);
        let dest = scratch.path().join(format!("x{i}"));
        std::fs::create_dir(&dest)?;
        untar.push(timed(
            Command::new("tar").args(["-xf", "-", "-C"]).arg(&dest),
            Some(&archive),
        )?);
        std::fs::remove_dir_all(&dest)?;
        // The same, into the workspace's own filesystem.
        let dest = Path::new(&s.workspace_path).join(format!(".untar{i}"));
        std::fs::create_dir(&dest)?;
        untar_same.push(timed(
            Command::new("tar").args(["-xf", "-", "-C"]).arg(&dest),
            Some(&archive),
        )?);
        std::fs::remove_dir_all(&dest)?;
        match kept {
            None => kept = Some(s),
            Some(_) => close(client, s.session_id).await?,
        }
    }
    let s = kept.ok_or("no session")?;
    let (sid, ws) = (s.session_id.clone(), PathBuf::from(&s.workspace_path));
    let (u, x) = (stats(&up), stats(&untar));
    let ratio = mb_per_s(archive.len(), u.p50) / mb_per_s(archive.len(), x.p50);
    rows.push(Row {
        figure: "UploadArchive, 100 MB tree of 10,000 files (plain tar), throughput".into(),
        ours: format!(
            "{:.0} MB/s ({})",
            mb_per_s(archive.len(), u.p50),
            secs(u.p50)
        ),
        baseline: format!(
            "tar -x into a local directory {:.0} MB/s ({})",
            mb_per_s(archive.len(), x.p50),
            secs(x.p50)
        ),
        ratio: format!("{ratio:.2}x"),
        target: verdict(ratio >= 0.8, ">= 0.8x local tar"),
    });
    let y = stats(&untar_same);
    rows.push(Row {
        figure: "UploadArchive, same tree, vs tar -x into the workspace's own filesystem".into(),
        ours: format!("{:.0} MB/s", mb_per_s(archive.len(), u.p50)),
        baseline: format!(
            "tar -x into the session's volume {:.0} MB/s ({})",
            mb_per_s(archive.len(), y.p50),
            secs(y.p50)
        ),
        ratio: format!("{:.2}x", y.p50.as_secs_f64() / u.p50.as_secs_f64()),
        target: String::new(),
    });

    // Download, against tar -c of the same workspace.
    let (mut down, mut tarc) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let (d, bytes) = download(client, &sid).await?;
        if bytes < total {
            return Err(format!("the download held {bytes} bytes").into());
        }
        down.push(d);
        tarc.push(timed(
            Command::new("tar")
                .args(["-cf", "-", "-C"])
                .arg(&ws)
                .arg("."),
            None,
        )?);
    }
    let (d, c) = (stats(&down), stats(&tarc));
    let ratio = c.p50.as_secs_f64() / d.p50.as_secs_f64();
    rows.push(Row {
        figure: "DownloadArchive of that tree, throughput".into(),
        ours: format!("{:.0} MB/s ({})", mb_per_s(total, d.p50), secs(d.p50)),
        baseline: format!(
            "tar -c of the workspace, read whole {:.0} MB/s ({})",
            mb_per_s(total, c.p50),
            secs(c.p50)
        ),
        ratio: format!("{ratio:.2}x"),
        target: verdict(ratio >= 0.8, ">= 0.8x local tar"),
    });

    // Checkpoints: the first (every content copied into the store, the
    // session's starting point with it), then one after 10 edits; restores
    // after a command removed the whole tree (every file written back) and
    // after it changed 10 files. cp -a of the tree is the baseline.
    let copy = scratch.path().join("git");
    let ok = Command::new("cp")
        .arg("-a")
        .arg(&tree)
        .arg(&copy)
        .status()?;
    if !ok.success() {
        return Err("cp -a failed".into());
    }
    let git = |args: &[&str]| -> Result<(), AnyError> {
        let ok = Command::new("git")
            .args(["-c", "user.name=b", "-c", "user.email=b@b"])
            .args(args)
            .current_dir(&copy)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        if ok.success() {
            Ok(())
        } else {
            Err(format!("git {args:?} failed").into())
        }
    };
    git(&["init", "-q"])?;
    git(&["add", "-A"])?;
    git(&["commit", "-qm", "base"])?;
    let (first, cp_first) = checkpoint(client, &sid).await?;
    let mut cpa = Vec::new();
    let (mut cps, mut full_restores, mut small_restores, mut changes, mut gitdiff) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..n {
        let dest = scratch.path().join(format!("cp{i}"));
        cpa.push(timed(
            Command::new("cp").arg("-a").arg(&ws).arg(&dest),
            None,
        )?);
        std::fs::remove_dir_all(&dest)?;
        // The changes after 10 edited files, against git diff of the same.
        edit_ten(client, &sid, &ws, &copy, i).await?;
        let t = Instant::now();
        let r = client
            .clone()
            .get_changes(pb::GetChangesRequest {
                session_id: sid.clone(),
                since_checkpoint: cp_first.clone(),
                max_patch_bytes: 0,
            })
            .await?
            .into_inner();
        changes.push(t.elapsed());
        if r.changes.len() != 10 * (i + 1) {
            return Err(format!(
                "{} changes listed after {} edits",
                r.changes.len(),
                10 * (i + 1)
            )
            .into());
        }
        gitdiff.push(timed(
            Command::new("git")
                .arg("-C")
                .arg(&copy)
                .args(["diff", "--no-ext-diff"]),
            None,
        )?);
        let (t, cp) = checkpoint(client, &sid).await?;
        cps.push(t);
        // A command changes 10 files; the restore writes them back.
        let exit = run_cmd(
            client,
            &sid,
            "for f in pkg00*/mod00*.py; do echo x >> $f; done",
        )
        .await?;
        if exit.exit_code != 0 {
            return Err("the command failed".into());
        }
        small_restores.push(restore(client, &sid, &cp).await?);
        // A command removes everything; the restore writes it all back.
        let exit = run_cmd(client, &sid, "rm -rf /workspace/pkg*").await?;
        if exit.exit_code != 0 {
            return Err("the command failed".into());
        }
        full_restores.push(restore(client, &sid, &cp).await?);
    }
    let (a, k) = (stats(&cpa), stats(&cps));
    rows.push(Row {
        figure: "CreateCheckpoint, that tree, first (every content copied)".into(),
        ours: format!("{} (one sample)", secs(first)),
        baseline: format!("cp -a of the workspace to the host disk {}", secs(a.p50)),
        ratio: format!("{:.2}x", first.as_secs_f64() / a.p50.as_secs_f64()),
        target: verdict(first <= Duration::from_secs(1), "<= 1 s"),
    });
    rows.push(Row {
        figure: "CreateCheckpoint, that tree, after 10 edited files".into(),
        ours: secs(k.p50),
        baseline: format!("cp -a of the workspace to the host disk {}", secs(a.p50)),
        ratio: format!("{:.3}x", k.p50.as_secs_f64() / a.p50.as_secs_f64()),
        target: verdict(k.p50 <= Duration::from_secs(1), "<= 1 s"),
    });
    let (f, sr) = (stats(&full_restores), stats(&small_restores));
    rows.push(Row {
        figure:
            "RestoreCheckpoint after a command removed the whole tree (10,000 files written back)"
                .into(),
        ours: secs(f.p50),
        baseline: format!("cp -a of the workspace to the host disk {}", secs(a.p50)),
        ratio: format!("{:.2}x", f.p50.as_secs_f64() / a.p50.as_secs_f64()),
        target: verdict(f.p50 <= Duration::from_secs(1), "<= 1 s"),
    });
    rows.push(Row {
        figure: "RestoreCheckpoint after a command changed 10 files".into(),
        ours: secs(sr.p50),
        baseline: format!("cp -a of the workspace to the host disk {}", secs(a.p50)),
        ratio: format!("{:.3}x", sr.p50.as_secs_f64() / a.p50.as_secs_f64()),
        target: verdict(sr.p50 <= Duration::from_secs(1), "<= 1 s"),
    });
    let (g, gd) = (stats(&changes), stats(&gitdiff));
    rows.push(Row {
        figure: "GetChanges after 10 more edited files (listing and patch)".into(),
        ours: format!("{} / {} / {}", ms(g.p50), ms(g.p90), ms(g.p99)),
        baseline: format!("git diff of the same edits {}", ms(gd.p50)),
        ratio: format!("{:.2}x", g.p50.as_secs_f64() / gd.p50.as_secs_f64()),
        target: verdict(g.p50 <= Duration::from_millis(200), "<= 200 ms"),
    });
    close(client, sid).await?;
    Ok(())
}
