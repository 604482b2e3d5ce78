//! What a viewer sees of the environment builds: each build running now,
//! its step and its last lines of output, and the last few that ended.
//! Bounded: [`LINES`] lines of [`LINE_CHARS`] characters per build, and
//! [`ENDED`] ended builds.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::SystemTime;

use crate::environment::Progress;

/// Lines of output kept per build.
pub const LINES: usize = 40;
/// Characters kept of one line.
pub const LINE_CHARS: usize = 400;
/// Ended builds kept.
pub const ENDED: usize = 8;

/// A build as a viewer sees it.
#[derive(Debug, Clone)]
pub struct WatchedBuild {
    /// The environment being built.
    pub name: String,
    /// When the call began.
    pub started: SystemTime,
    /// The step it is at: (number, total, instruction).
    pub step: Option<(u32, u32, String)>,
    /// Its last lines of output.
    pub lines: VecDeque<String>,
    /// How it ended, in brief; `None` while it runs.
    pub ended: Option<String>,
}

/// The builds, for viewers.
#[derive(Debug, Default)]
pub struct BuildWatch {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    next: u64,
    running: Vec<(u64, WatchedBuild)>,
    ended: VecDeque<WatchedBuild>,
}

impl BuildWatch {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A build call of `name` began; its handle.
    pub fn begun(&self, name: &str) -> u64 {
        let mut st = self.state();
        st.next += 1;
        let id = st.next;
        st.running.push((
            id,
            WatchedBuild {
                name: name.to_string(),
                started: SystemTime::now(),
                step: None,
                lines: VecDeque::new(),
                ended: None,
            },
        ));
        id
    }

    /// Build `id` made progress.
    pub fn progress(&self, id: u64, progress: &Progress) {
        let mut st = self.state();
        let Some((_, b)) = st.running.iter_mut().find(|(i, _)| *i == id) else {
            return;
        };
        match progress {
            Progress::Step {
                number,
                total,
                instruction,
            } => {
                b.step = Some((
                    *number,
                    *total,
                    instruction.chars().take(LINE_CHARS).collect(),
                ))
            }
            Progress::Output(line) => {
                if b.lines.len() >= LINES {
                    b.lines.pop_front();
                }
                b.lines.push_back(line.chars().take(LINE_CHARS).collect());
            }
            Progress::Joined | Progress::Done(_) => {}
        }
    }

    /// Build `id` ended as `how`.
    pub fn ended(&self, id: u64, how: String) {
        let mut st = self.state();
        let Some(at) = st.running.iter().position(|(i, _)| *i == id) else {
            return;
        };
        let (_, mut b) = st.running.remove(at);
        b.ended = Some(how);
        if st.ended.len() >= ENDED {
            st.ended.pop_front();
        }
        st.ended.push_back(b);
    }

    /// The builds running now, then those that ended last (newest first).
    pub fn shown(&self) -> Vec<WatchedBuild> {
        let st = self.state();
        st.running
            .iter()
            .map(|(_, b)| b.clone())
            .chain(st.ended.iter().rev().cloned())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_build_keeps_its_last_lines_and_only_the_last_ended_builds_are_kept() {
        let w = BuildWatch::default();
        let id = w.begun("py");
        for i in 0..(LINES + 5) {
            w.progress(id, &Progress::Output(format!("line {i}")));
        }
        let shown = w.shown();
        assert_eq!(shown[0].lines.len(), LINES);
        assert_eq!(
            shown[0].lines.back().unwrap(),
            &format!("line {}", LINES + 4)
        );
        w.ended(id, "built".into());
        for _ in 0..ENDED {
            let id = w.begun("other");
            w.ended(id, "failed".into());
        }
        let shown = w.shown();
        assert_eq!(shown.len(), ENDED);
        assert!(shown.iter().all(|b| b.name == "other"));
    }
}
