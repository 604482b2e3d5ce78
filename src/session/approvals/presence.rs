//! Who can answer now: approvers listening or seen lately, each for every
//! session or for one. An approver that lists one session's waits (the
//! MCP bridge, for its own session) is present for that session alone, so
//! another session's call is not held for a person who never sees it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// What an approver answers for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Every session (the operator's `sandboxd approvals`, the web view).
    All,
    /// One session.
    Session(String),
}

impl Scope {
    /// Whether a wait of `session` is in this scope.
    pub fn covers(&self, session: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::Session(id) => id == session,
        }
    }
}

/// Most scopes remembered as seen: the oldest is forgotten past it (the
/// operator names the scopes, so the table stays small in practice).
const MAX_SCOPES: usize = 4096;

/// Presence per scope.
#[derive(Debug, Default)]
pub struct Presence {
    /// Approvers waiting in a long poll now.
    listening: HashMap<Scope, usize>,
    /// When an approver was last seen.
    seen: HashMap<Scope, Instant>,
}

impl Presence {
    /// Marks an approver of `scope` as seen now; forgets scopes not seen
    /// for `absent_after`.
    pub fn seen(&mut self, scope: &Scope, absent_after: Duration) {
        let now = Instant::now();
        self.seen
            .retain(|_, at| now.duration_since(*at) <= absent_after);
        if self.seen.len() >= MAX_SCOPES && !self.seen.contains_key(scope) {
            let oldest = self
                .seen
                .iter()
                .min_by_key(|(_, at)| **at)
                .map(|(s, _)| s.clone());
            if let Some(oldest) = oldest {
                self.seen.remove(&oldest);
            }
        }
        self.seen.insert(scope.clone(), now);
    }

    /// An approver of `scope` starts a long poll.
    pub fn listen(&mut self, scope: &Scope) {
        *self.listening.entry(scope.clone()).or_default() += 1;
    }

    /// An approver of `scope` ends its long poll.
    pub fn unlisten(&mut self, scope: &Scope) {
        if let Some(n) = self.listening.get_mut(scope) {
            *n -= 1;
            if *n == 0 {
                self.listening.remove(scope);
            }
        }
    }

    /// Whether someone can answer for `session`: an approver of every
    /// session or of this one, listening or seen within `absent_after`.
    pub fn present_for(&self, session: &str, absent_after: Duration) -> bool {
        let own = Scope::Session(session.to_string());
        [&Scope::All, &own].into_iter().any(|scope| {
            self.listening.contains_key(scope)
                || self
                    .seen
                    .get(scope)
                    .is_some_and(|at| at.elapsed() <= absent_after)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    #[test]
    fn an_approver_of_one_session_is_present_for_it_alone() {
        let mut p = Presence::default();
        assert!(!p.present_for("a", MINUTE));
        p.seen(&Scope::Session("a".into()), MINUTE);
        assert!(p.present_for("a", MINUTE));
        assert!(!p.present_for("b", MINUTE), "b's approver was never seen");
        p.seen(&Scope::All, MINUTE);
        assert!(p.present_for("b", MINUTE));
    }

    #[test]
    fn a_listening_approver_is_present_until_it_stops() {
        let mut p = Presence::default();
        let a = Scope::Session("a".into());
        p.listen(&a);
        assert!(p.present_for("a", Duration::ZERO));
        assert!(!p.present_for("b", Duration::ZERO));
        p.unlisten(&a);
        assert!(!p.present_for("a", Duration::ZERO));
    }

    #[test]
    fn the_table_of_scopes_is_bounded() {
        let mut p = Presence::default();
        for i in 0..MAX_SCOPES + 10 {
            p.seen(&Scope::Session(i.to_string()), MINUTE);
        }
        assert_eq!(p.seen.len(), MAX_SCOPES);
        assert!(p.present_for(&(MAX_SCOPES + 9).to_string(), MINUTE));
    }
}
