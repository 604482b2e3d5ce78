//! A long-running process's family: every process descended from its
//! leader, found by parentage in `/proc`. A child that left the leader's
//! group (`setsid`, a shell's job on a terminal) is still its child, and
//! one whose parent exited was handed to the leader, which is made a child
//! subreaper before it runs ([`become_subreaper`]). Stopping a process
//! ends its whole family, not only its group.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

/// Makes the calling process (the leader, between fork and exec) the
/// parent of its orphaned descendants; kept across exec.
pub(super) fn become_subreaper() -> std::io::Result<()> {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))?;
    Ok(())
}

/// Every process now descended from `leader` (the leader not included).
pub(super) fn descendants(leader: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if let Some(ppid) = parent_of(pid) {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let mut found = Vec::new();
    let mut seen = HashSet::from([leader]);
    let mut next = vec![leader];
    while let Some(p) = next.pop() {
        for &c in children.get(&p).map_or(&[][..], Vec::as_slice) {
            if seen.insert(c) {
                found.push(c);
                next.push(c);
            }
        }
    }
    found
}

/// The parent of `pid`, from its stat line (the name may hold spaces and
/// parentheses: the fields start after the last `)`).
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Sends `signal` to each of `pids`.
pub(super) fn signal_all(pids: &[u32], signal: Signal) {
    for &p in pids {
        if let Some(pid) = i32::try_from(p).ok().and_then(Pid::from_raw) {
            let _ = rustix::process::kill_process(pid, signal);
        }
    }
}

/// Kills what is left of `pids` and waits up to `grace` for them to go;
/// returns whether any had to be killed, and whether all are gone.
pub(super) async fn end(pids: &[u32], grace: Duration) -> (bool, bool) {
    let alive = |pids: &[u32]| -> Vec<u32> {
        pids.iter()
            .copied()
            .filter(|&p| {
                i32::try_from(p)
                    .ok()
                    .and_then(Pid::from_raw)
                    .is_some_and(|pid| {
                        rustix::process::test_kill_process(pid).is_ok() && !zombie(p)
                    })
            })
            .collect()
    };
    let left = alive(pids);
    if left.is_empty() {
        return (false, true);
    }
    signal_all(&left, Signal::KILL);
    let until = Instant::now() + grace;
    loop {
        if alive(&left).is_empty() {
            return (true, true);
        }
        if Instant::now() >= until {
            return (true, false);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether `pid` is a zombie (dead, waiting for its parent to reap it).
fn zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, r)| r.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_child_that_left_the_group_is_still_family_and_ends_with_it() {
        use std::os::unix::process::CommandExt;
        // A shell whose child starts a session of its own.
        let mut leader = std::process::Command::new("sh")
            .args(["-c", "setsid sleep 600 & wait"])
            .process_group(0)
            .spawn()
            .unwrap();
        let me = leader.id();
        let until = Instant::now() + Duration::from_secs(10);
        let family = loop {
            let f = descendants(me);
            if !f.is_empty() || Instant::now() > until {
                break f;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert_eq!(family.len(), 1, "{family:?}");
        // The group kill misses it; ending the family does not.
        let group = Pid::from_raw(me as i32).unwrap();
        let _ = rustix::process::kill_process_group(group, Signal::KILL);
        let _ = leader.wait();
        let sleeper = Pid::from_raw(family[0] as i32).unwrap();
        assert!(
            rustix::process::test_kill_process(sleeper).is_ok(),
            "it left the group"
        );
        assert_eq!(end(&family, Duration::from_secs(5)).await, (true, true));
    }
}
