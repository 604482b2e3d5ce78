use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use rustix::fs::{Mode, OFlags};

use super::super::restore::{self, Stage, Step};
use super::*;

fn dir_fd(p: &Path) -> OwnedFd {
    rustix::fs::open(
        p,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .unwrap()
}

fn mode(p: &Path) -> u32 {
    fs::symlink_metadata(p).unwrap().permissions().mode() & 0o777
}

/// Names at the root that are ours (staging directories).
fn stages(ws: &Path) -> Vec<String> {
    fs::read_dir(ws)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".sandboxd-"))
        .collect()
}

fn records(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// The tree before: a.txt, gone.txt, d/x (0644). After: a.txt replaced,
/// gone.txt removed, new/ made with new/b.txt, d/x 0700, new 0750.
fn before(ws: &Path) {
    fs::write(ws.join("a.txt"), "old a").unwrap();
    fs::write(ws.join("gone.txt"), "bye").unwrap();
    fs::create_dir(ws.join("d")).unwrap();
    fs::write(ws.join("d/x"), "x").unwrap();
    fs::set_permissions(ws.join("d/x"), fs::Permissions::from_mode(0o644)).unwrap();
}

const STEPS: [Step<'static>; 6] = [
    Step::Remove(b"gone.txt"),
    Step::MakeDir(b"new"),
    Step::Place(b"new/b.txt", 0),
    Step::Exchange(b"a.txt", 1),
    Step::Chmod(b"new", 0o750),
    Step::Chmod(b"d/x", 0o700),
];

fn assert_after(ws: &Path) {
    assert_eq!(fs::read_to_string(ws.join("a.txt")).unwrap(), "new a");
    assert!(!ws.join("gone.txt").exists());
    assert_eq!(fs::read_to_string(ws.join("new/b.txt")).unwrap(), "b");
    assert_eq!(mode(&ws.join("new")), 0o750);
    assert_eq!(mode(&ws.join("d/x")), 0o700);
}

fn assert_before(ws: &Path) {
    assert_eq!(fs::read_to_string(ws.join("a.txt")).unwrap(), "old a");
    assert_eq!(fs::read_to_string(ws.join("gone.txt")).unwrap(), "bye");
    assert!(!ws.join("new").exists());
    assert_eq!(mode(&ws.join("d/x")), 0o644);
}

/// A workspace as [`before`] makes it, a directory for records, and
/// their fds.
fn setup() -> (tempfile::TempDir, tempfile::TempDir, OwnedFd, Intents) {
    let (ws, kept) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    before(ws.path());
    let root = dir_fd(ws.path());
    let intents = Intents::new(dir_fd(kept.path()));
    (ws, kept, root, intents)
}

/// Stages the two entries and records the landing, as `land` does.
fn staged(root: &OwnedFd, intents: &Intents) -> Stage {
    let stage = Stage::new(root, "upload", Some(intents)).unwrap();
    for (n, body) in [(0, "b"), (1, "new a")] {
        let fd = rustix::fs::openat(
            stage.fd(),
            n.to_string().as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )
        .unwrap();
        std::fs::File::from(fd).write_all(body.as_bytes()).unwrap();
    }
    stage.record(&STEPS, None).unwrap();
    stage
}

#[test]
fn a_landing_cut_short_after_any_step_is_finished_at_the_next_start() {
    for done in 0..=STEPS.len() {
        let (ws, kept, root, intents) = setup();
        let stage = staged(&root, &intents);
        let mut undo = Vec::new();
        restore::apply(&root, stage.fd(), &STEPS[..done], None, None, &mut undo).unwrap();
        // The service dies here: the stage is neither removed nor kept.
        drop(stage);

        let finished = finish(&root, &Intents::new(dir_fd(kept.path()))).unwrap();
        assert_eq!(
            finished,
            vec![Finished {
                what: "upload".into(),
                outcome: Outcome::Completed { steps: STEPS.len() },
            }],
            "after {done} steps"
        );
        assert_after(ws.path());
        assert!(stages(ws.path()).is_empty(), "after {done} steps");
        assert!(records(kept.path()).is_empty(), "after {done} steps");
        // Finishing again finds nothing to do.
        assert!(finish(&root, &intents).unwrap().is_empty());
    }
}

#[test]
fn a_landing_cut_short_while_its_staging_directory_was_removed_is_finished() {
    let (ws, _kept, root, intents) = setup();
    let stage = staged(&root, &intents);
    restore::apply(&root, stage.fd(), &STEPS, None, None, &mut Vec::new()).unwrap();
    // Removal had begun: the removed file's trash is gone already.
    rustix::fs::unlinkat(stage.fd(), "trash.1", rustix::fs::AtFlags::empty()).unwrap();
    drop(stage);
    let finished = finish(&root, &intents).unwrap();
    assert_eq!(
        finished[0].outcome,
        Outcome::Completed { steps: STEPS.len() }
    );
    assert_after(ws.path());
    assert!(stages(ws.path()).is_empty());
}

#[test]
fn a_landing_cut_short_while_it_was_being_undone_is_finished() {
    let (ws, _kept, root, intents) = setup();
    let stage = staged(&root, &intents);
    let mut undo = Vec::new();
    restore::apply(&root, stage.fd(), &STEPS[..4], None, None, &mut undo).unwrap();
    // Half undone (the exchange and the placing) when the service died.
    let newest: Vec<_> = undo.drain(2..).collect();
    assert_eq!(restore::rollback(&root, stage.fd(), newest), 0);
    drop(stage);
    let finished = finish(&root, &intents).unwrap();
    assert_eq!(
        finished[0].outcome,
        Outcome::Completed { steps: STEPS.len() }
    );
    assert_after(ws.path());
}

#[test]
fn a_crash_while_staging_changes_nothing_and_its_staging_directory_goes() {
    let (ws, kept, root, intents) = setup();
    let stage = Stage::new(&root, "patch", Some(&intents)).unwrap();
    fs::write(ws.path().join(&stages(ws.path())[0]).join("0"), "half").unwrap();
    drop(stage);
    let finished = finish(&root, &intents).unwrap();
    assert_eq!(
        finished,
        vec![Finished {
            what: "patch".into(),
            outcome: Outcome::Dropped,
        }]
    );
    assert_before(ws.path());
    assert!(stages(ws.path()).is_empty());
    assert!(records(kept.path()).is_empty());
}

#[test]
fn a_landing_that_cannot_be_finished_is_undone() {
    let (ws, kept, root, intents) = setup();
    let stage = staged(&root, &intents);
    restore::apply(&root, stage.fd(), &STEPS[..2], None, None, &mut Vec::new()).unwrap();
    drop(stage);
    // Something removed a.txt meanwhile: exchanging it fails.
    fs::remove_file(ws.path().join("a.txt")).unwrap();
    let finished = finish(&root, &intents).unwrap();
    assert!(
        matches!(&finished[0].outcome, Outcome::Undone { left_in: None, .. }),
        "{finished:?}"
    );
    // Every step done is undone.
    assert_eq!(
        fs::read_to_string(ws.path().join("gone.txt")).unwrap(),
        "bye"
    );
    assert!(!ws.path().join("new").exists());
    assert!(!ws.path().join("a.txt").exists());
    assert!(stages(ws.path()).is_empty());
    assert!(records(kept.path()).is_empty());
}

#[test]
fn a_finished_or_failed_landing_leaves_no_record() {
    let (ws, kept, root, intents) = setup();
    let stage = staged(&root, &intents);
    restore::land(&root, &stage, &STEPS, None).unwrap();
    stage.remove(&root);
    assert_after(ws.path());
    assert!(records(kept.path()).is_empty());
    assert!(stages(ws.path()).is_empty());
    // A failed one (a step that cannot be taken) is undone, and its
    // record goes too.
    let stage = Stage::new(&root, "patch", Some(&intents)).unwrap();
    let steps = [Step::Remove(b"a.txt"), Step::Remove(b"missing")];
    assert!(restore::land(&root, &stage, &steps, None).is_err());
    stage.remove(&root);
    assert_eq!(
        fs::read_to_string(ws.path().join("a.txt")).unwrap(),
        "new a"
    );
    assert!(records(kept.path()).is_empty());
}

#[test]
fn records_that_are_not_ours_are_dropped_and_touch_nothing() {
    let (ws, kept, root, intents) = setup();
    fs::create_dir(ws.path().join("keep")).unwrap();
    for (name, text) in [
        ("landing.1", "garbage".to_string()),
        (
            "landing.2",
            format!("{MAGIC}\nwhat upload\nstage keep\nphase staging\nend\n"),
        ),
        (
            "landing.3",
            format!("{MAGIC}\nwhat upload\nstage .sandboxd-x/../keep\nphase staging\nend\n"),
        ),
        (
            "landing.4",
            format!("{MAGIC}\nwhat upload\nstage .sandboxd-x\nphase staging\n"),
        ),
    ] {
        fs::write(kept.path().join(name), text).unwrap();
    }
    let finished = finish(&root, &intents).unwrap();
    assert_eq!(finished.len(), 4);
    assert!(
        finished
            .iter()
            .all(|f| matches!(f.outcome, Outcome::Unreadable(_))),
        "{finished:?}"
    );
    assert!(ws.path().join("keep").is_dir());
    assert_before(ws.path());
    assert!(records(kept.path()).is_empty());
}
