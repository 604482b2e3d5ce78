//! The container's cgroup, read and written from the host where the
//! service shares the daemon's host (the usual case): the counters a
//! command's exit reports (OOM kills, refused forks), and ending every
//! process of a container at once without a round trip through the engine.
//! Wherever the daemon's cgroup driver and version put the container: under
//! a cgroup v1 controller, or in the unified v2 hierarchy.

use std::time::{Duration, Instant};

/// How long a v1 freezer may take to freeze a container before the kill
/// is left to the engine.
const FREEZE_WITHIN: Duration = Duration::from_millis(500);

/// Whether `id` is a container id (hex): it is put in paths.
fn is_id(id: &str) -> bool {
    !id.is_empty() && id.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Reads a counter of the container's cgroup (`key N` in `file`), wherever
/// the daemon's cgroup driver and version put it: under the cgroup v1
/// controller `v1` or in the unified v2 hierarchy. Only works when the
/// service shares the daemon's host (the usual case); `None` otherwise. A
/// sysfs read is a memory copy, so it is done inline.
fn cgroup_counter(id: &str, v1: &str, v1_file: &str, v2_file: &str, key: &str) -> Option<u64> {
    if !is_id(id) {
        return None;
    }
    let candidates = [
        format!("/sys/fs/cgroup/{v1}/docker/{id}/{v1_file}"),
        format!("/sys/fs/cgroup/{v1}/system.slice/docker-{id}.scope/{v1_file}"),
        format!("/sys/fs/cgroup/docker/{id}/{v2_file}"),
        format!("/sys/fs/cgroup/system.slice/docker-{id}.scope/{v2_file}"),
    ];
    candidates.iter().find_map(|path| {
        let text = std::fs::read_to_string(path).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
            .and_then(|n| n.trim().parse().ok())
    })
}

/// How many processes of the container the OOM killer has ended.
pub(super) fn oom_kills(id: &str) -> Option<u64> {
    cgroup_counter(
        id,
        "memory",
        "memory.oom_control",
        "memory.events",
        "oom_kill",
    )
}

/// How many forks the container's pids limit has refused.
pub(super) fn pids_refusals(id: &str) -> Option<u64> {
    cgroup_counter(id, "pids", "pids.events", "pids.events", "max")
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
