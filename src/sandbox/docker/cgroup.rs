//! The container's cgroup, read and written from the host where the
//! service shares the daemon's host (the usual case): the counters a
//! command's exit reports (OOM kills, refused forks), and ending every
//! process of a container at once without a round trip through the engine.
//! Wherever the daemon's cgroup driver and version put the container: under
//! a cgroup v1 controller, or in the unified v2 hierarchy.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a v1 freezer may take to freeze a container before the kill
/// is left to the engine.
const FREEZE_WITHIN: Duration = Duration::from_millis(500);

/// Whether `id` is a container id (hex): it is put in paths.
fn is_id(id: &str) -> bool {
    !id.is_empty() && id.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The counter files of the containers commands ran in, kept open: a
/// command's exit reads two of them before and after it, and a `pread` of
/// an open sysfs file costs a microsecond where opening it by its path
/// (six components, on a cold cache after a pause) cost tens. Entries go
/// when their container is removed; a file whose cgroup went (the
/// container stopped) fails its read and is opened again.
#[derive(Debug, Default)]
pub(super) struct Counters {
    open: Mutex<HashMap<String, Arc<Files>>>,
}

/// One container's open counter files.
#[derive(Debug, Default)]
struct Files {
    oom: Option<File>,
    pids: Option<File>,
}

/// Containers whose files are kept (two each): past it, the cache starts
/// over, so files of containers removed behind its back do not pile up
/// and the service's descriptors stay bounded (see `SPARE_FDS` in the
/// server). Twice the default session limit: a full service keeps them.
const MAX_OPEN: usize = 512;

impl Counters {
    /// How many processes of container `id` the OOM killer has ended.
    pub(super) fn oom_kills(&self, id: &str) -> Option<u64> {
        self.read(id, |f| f.oom.as_ref(), "oom_kill")
    }

    /// How many forks container `id`'s pids limit has refused.
    pub(super) fn pids_refusals(&self, id: &str) -> Option<u64> {
        self.read(id, |f| f.pids.as_ref(), "max")
    }

    /// Closes container `id`'s files: it is removed.
    pub(super) fn forget(&self, id: &str) {
        self.lock().remove(id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Files>>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads `key N` from the file `which` picks, opening the container's
    /// files first if they are not open, and again once if the read fails.
    fn read(&self, id: &str, which: fn(&Files) -> Option<&File>, key: &str) -> Option<u64> {
        if !is_id(id) {
            return None;
        }
        let cached = self.lock().get(id).cloned();
        if let Some(n) = cached.and_then(|files| which(&files).and_then(|f| counter(f, key))) {
            return Some(n);
        }
        let files = Arc::new(Files::open(id));
        let n = which(&files).and_then(|f| counter(f, key));
        let mut open = self.lock();
        if open.len() >= MAX_OPEN {
            open.clear();
        }
        open.insert(id.to_string(), files);
        n
    }
}

impl Files {
    /// Container `id`'s counter files, wherever the daemon's cgroup driver
    /// and version put them: under the cgroup v1 controllers or in the
    /// unified v2 hierarchy. Only there when the service shares the
    /// daemon's host (the usual case).
    fn open(id: &str) -> Files {
        let first = |v1: &str, v1_file: &str, v2_file: &str| {
            [
                format!("/sys/fs/cgroup/{v1}/docker/{id}/{v1_file}"),
                format!("/sys/fs/cgroup/{v1}/system.slice/docker-{id}.scope/{v1_file}"),
                format!("/sys/fs/cgroup/docker/{id}/{v2_file}"),
                format!("/sys/fs/cgroup/system.slice/docker-{id}.scope/{v2_file}"),
            ]
            .iter()
            .find_map(|path| File::open(path).ok())
        };
        Files {
            oom: first("memory", "memory.oom_control", "memory.events"),
            pids: first("pids", "pids.events", "pids.events"),
        }
    }
}

/// The counter `key N` of the open sysfs file `file`, read whole from its
/// start (a sysfs file renders anew on a read at offset 0).
fn counter(file: &File, key: &str) -> Option<u64> {
    let mut buf = [0u8; 512];
    let n = file.read_at(&mut buf, 0).ok()?;
    std::str::from_utf8(&buf[..n])
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
        .and_then(|n| n.trim().parse().ok())
}

/// Sends SIGKILL to every process of container `id` at once, from the
/// host: through `cgroup.kill` (v2), or (v1) with its freezer frozen, so
/// that nothing can fork between the listing of its processes and their
/// kill, then thawed, when each dies before running another instruction.
/// False when this host's cgroups cannot do it (not shared with the
/// daemon, no permission, a freeze that did not complete): the caller
/// then goes through the engine. Blocking (a few small sysfs writes).
pub(super) fn kill_all(id: &str) -> bool {
    if !is_id(id) {
        return false;
    }
    for dir in [
        format!("/sys/fs/cgroup/docker/{id}"),
        format!("/sys/fs/cgroup/system.slice/docker-{id}.scope"),
    ] {
        if std::fs::write(format!("{dir}/cgroup.kill"), "1").is_ok() {
            return true;
        }
    }
    for dir in [
        format!("/sys/fs/cgroup/freezer/docker/{id}"),
        format!("/sys/fs/cgroup/freezer/system.slice/docker-{id}.scope"),
    ] {
        let state = format!("{dir}/freezer.state");
        if std::fs::write(&state, "FROZEN").is_err() {
            continue;
        }
        let until = Instant::now() + FREEZE_WITHIN;
        let frozen = loop {
            match std::fs::read_to_string(&state) {
                Ok(s) if s.trim() == "FROZEN" => break true,
                Ok(_) if Instant::now() < until => std::thread::sleep(Duration::from_millis(1)),
                _ => break false,
            }
        };
        if frozen {
            let procs = std::fs::read_to_string(format!("{dir}/cgroup.procs")).unwrap_or_default();
            for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                }
            }
        }
        let thawed = std::fs::write(&state, "THAWED").is_ok();
        return frozen && thawed;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counter_is_read_whole_from_the_start_each_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("memory.oom_control");
        std::fs::write(&path, "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n").unwrap();
        let file = File::open(&path).unwrap();
        assert_eq!(counter(&file, "oom_kill"), Some(3));
        // Not `oom_kill_disable`: the key is followed by a space.
        assert_eq!(counter(&file, "under_oom"), Some(0));
        std::fs::write(&path, "oom_kill_disable 0\nunder_oom 0\noom_kill 4\n").unwrap();
        assert_eq!(
            counter(&file, "oom_kill"),
            Some(4),
            "read again from offset 0"
        );
        assert_eq!(counter(&file, "max"), None);
    }

    #[test]
    fn no_counter_for_a_name_that_is_not_a_container_id() {
        let counters = Counters::default();
        assert_eq!(counters.pids_refusals("../../etc"), None);
        assert_eq!(counters.oom_kills(""), None);
        assert!(counters.lock().is_empty(), "nothing opened or kept");
    }
}
