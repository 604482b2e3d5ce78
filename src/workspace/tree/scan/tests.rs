use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use super::super::tests::{root, store};
use super::*;

fn sparse(path: &Path, size: u64) {
    fs::File::create(path).unwrap().set_len(size).unwrap();
}

#[test]
fn a_sparse_terabyte_file_is_recorded_unread_by_its_size_at_once() {
    let (ws, st) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    sparse(&ws.path().join("big"), 1 << 40);
    fs::write(ws.path().join("small"), "s").unwrap();
    let r = root(ws.path());
    let t = Instant::now();
    let m = scan(&r, None, ScanLimits::default(), None).unwrap();
    // With a store too: nothing of it is kept.
    let mut kept = store(st.path(), 1 << 20);
    let b = scan(&r, None, ScanLimits::default(), Some(&mut kept)).unwrap();
    assert!(t.elapsed().as_secs() < 5, "{:?}", t.elapsed());
    assert!(kept.bytes() < 100, "{}", kept.bytes());
    for m in [&m, &b] {
        match &m.entries[&b"big"[..]] {
            Node::File {
                size,
                hashed: false,
                ..
            } => assert_eq!(*size, 1 << 40),
            other => panic!("{other:?}"),
        }
        assert_eq!(m.unread(), Some((&b"big"[..], 1 << 40)));
    }
    // Touched (a new stamp), its recorded hash changes: a change is seen.
    fs::OpenOptions::new()
        .write(true)
        .open(ws.path().join("big"))
        .unwrap()
        .set_len((1 << 40) + 1)
        .unwrap();
    let again = scan(&r, Some(&m), ScanLimits::default(), None).unwrap();
    assert!(!again.entries[&b"big"[..]].same(&m.entries[&b"big"[..]]));
    // Kept on the disk and read back, it stays unread.
    let back = Manifest::from_stored(&m.stored()).unwrap();
    assert_eq!(back.unread(), Some((&b"big"[..], 1 << 40)));
}

#[test]
fn a_scan_past_its_read_budget_or_time_is_refused_naming_the_bound() {
    let ws = tempfile::tempdir().unwrap();
    for i in 0..4 {
        fs::write(ws.path().join(format!("f{i}")), vec![b'x'; 1 << 20]).unwrap();
    }
    let r = root(ws.path());
    let limits = ScanLimits {
        max_read_bytes: 2 << 20,
        ..ScanLimits::default()
    };
    match scan(&r, None, limits, None) {
        Err(ScanError::ReadBudget { limit }) => assert_eq!(limit, 2 << 20),
        other => panic!("{other:?}"),
    }
    let limits = ScanLimits {
        max_time: Duration::ZERO,
        ..ScanLimits::default()
    };
    assert!(matches!(
        scan(&r, None, limits, None),
        Err(ScanError::TimedOut { .. })
    ));
    // A cached file costs nothing of the budget.
    let first = scan(&r, None, ScanLimits::default(), None).unwrap();
    std::thread::sleep(SETTLED + COARSE);
    let limits = ScanLimits {
        max_read_bytes: 1,
        ..ScanLimits::default()
    };
    let again = scan(&r, Some(&first), ScanLimits::default(), None).unwrap();
    scan(&r, Some(&again), limits, None).unwrap();
}

#[test]
fn a_cancelled_scan_stops_inside_a_file_being_read() {
    let ws = tempfile::tempdir().unwrap();
    // Within the per-file bound, so read: 1 GiB of zeros takes seconds.
    sparse(&ws.path().join("zeros"), 1 << 30);
    let r = root(ws.path());
    let flag = Arc::new(AtomicBool::new(false));
    let raise = Arc::clone(&flag);
    let raiser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        raise.store(true, Ordering::Relaxed);
    });
    let t = Instant::now();
    let got = scan_until(&r, None, ScanLimits::default(), None, &flag);
    raiser.join().unwrap();
    assert!(matches!(got, Err(ScanError::Cancelled)), "{got:?}");
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
}

#[test]
fn a_tree_of_long_names_past_the_memory_bound_is_refused_before_it_is_held() {
    let ws = tempfile::tempdir().unwrap();
    let long = "n".repeat(200);
    for i in 0..200 {
        fs::write(ws.path().join(format!("{long}{i}")), "").unwrap();
    }
    let r = root(ws.path());
    let limits = ScanLimits {
        max_memory: 20_000,
        ..ScanLimits::default()
    };
    // One directory's listing alone passes it: refused while listing.
    match scan(&r, None, limits, None) {
        Err(ScanError::TooMuchMemory { limit }) => assert_eq!(limit, 20_000),
        other => panic!("{other:?}"),
    }
    // Spread over directories, the picture passes it as it grows.
    let ws = tempfile::tempdir().unwrap();
    for d in 0..20 {
        let dir = ws.path().join(format!("{long}{d}"));
        fs::create_dir(&dir).unwrap();
        for i in 0..5 {
            fs::write(dir.join(format!("{long}{i}")), "").unwrap();
        }
    }
    let r = root(ws.path());
    assert!(matches!(
        scan(&r, None, limits, None),
        Err(ScanError::TooMuchMemory { .. })
    ));
    let m = scan(&r, None, ScanLimits::default(), None).unwrap();
    assert!(m.memory() > 20_000);
}

#[test]
fn a_ctime_of_whole_seconds_is_settled_only_a_second_later() {
    let scan_at = (1000, 500_000_000);
    // Fine-grained: settled 100 ms before.
    assert!(settled((1000, 400_000_000), scan_at));
    assert!(!settled((1000, 450_000_000), scan_at));
    // Whole seconds: a write at 1000.7 s is stamped 1000.0 too.
    assert!(!settled((1000, 0), scan_at));
    assert!(!settled((999, 0), (1000, 0)));
    assert!(settled((999, 0), (1000, 100_000_000)));
}

/// A small ext4 volume with 128-byte inodes, loop-mounted: its timestamps
/// are whole seconds. Needs root (as the service runs).
struct Coarse {
    dir: tempfile::TempDir,
}

impl Coarse {
    fn mount() -> Coarse {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("image");
        let mnt = dir.path().join("mnt");
        fs::create_dir(&mnt).unwrap();
        fs::File::create(&image).unwrap().set_len(16 << 20).unwrap();
        let run = |cmd: &str, args: &[&std::ffi::OsStr]| {
            let out = std::process::Command::new(cmd).args(args).output().unwrap();
            assert!(
                out.status.success(),
                "{cmd} failed (this test needs root and e2fsprogs): {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        run(
            "mkfs.ext4",
            &[
                "-q".as_ref(),
                "-I".as_ref(),
                "128".as_ref(),
                image.as_os_str(),
            ],
        );
        run(
            "mount",
            &[
                "-o".as_ref(),
                "loop".as_ref(),
                image.as_os_str(),
                mnt.as_os_str(),
            ],
        );
        Coarse { dir }
    }

    fn path(&self) -> std::path::PathBuf {
        self.dir.path().join("mnt")
    }
}

impl Drop for Coarse {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.path())
            .status();
    }
}

#[test]
fn a_same_size_rewrite_in_the_same_second_on_a_coarse_filesystem_is_seen() {
    let vol = Coarse::mount();
    let ws = vol.path();
    let r = root(&ws);
    fs::write(ws.join("f"), "aaaa").unwrap();
    let st = rustix::fs::stat(ws.join("f")).unwrap();
    assert_eq!(
        st.st_ctime_nsec, 0,
        "ext4 with 128-byte inodes stamps whole seconds"
    );
    // Every step within one second, so the ctime cannot tell the versions
    // apart, and the scan more than the fine-grained margin past the
    // second's start (where a ctime of nanoseconds would be settled).
    for _ in 0..200 {
        if (150_000_000..500_000_000).contains(&now().1) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    fs::write(ws.join("f"), "aaaa").unwrap();
    let first = scan(&r, None, ScanLimits::default(), None).unwrap();
    fs::write(ws.join("f"), "bbbb").unwrap();
    let st2 = rustix::fs::stat(ws.join("f")).unwrap();
    assert_eq!((st.st_ino, st.st_size), (st2.st_ino, st2.st_size));
    let again = scan(&r, Some(&first), ScanLimits::default(), None).unwrap();
    let (Node::File { sha256: a, .. }, Node::File { sha256: b, .. }) =
        (&first.entries[&b"f"[..]], &again.entries[&b"f"[..]])
    else {
        panic!("not files");
    };
    assert_ne!(a, b, "the rewrite was taken for unchanged");
}
