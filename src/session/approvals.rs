//! Plans and calls waiting for a person, and the people who answer them.
//!
//! A call that needs approval registers here ([`Approvals::ask`]) and waits
//! on its [`Ticket`]; an approver lists what waits ([`Approvals::pending`])
//! and decides ([`Approvals::decide`]). Nothing is held where nobody can
//! answer: an unattended session, or no approver seen within the operator's
//! `absent_after`, is refused at once. A wait that nobody answers in time
//! ends as a rejection, never an approval; a caller that leaves withdraws
//! its wait (the ticket's drop), and a closing session withdraws all of
//! its own. What waits is bounded per session and in all.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, oneshot};

use crate::policy::Withheld;
use crate::policy::plan::Plan;

mod presence;

use presence::Presence;
pub use presence::Scope;

/// Operator settings for approvals.
#[derive(Debug, Clone, Copy)]
pub struct ApprovalConfig {
    /// How long a plan or call waits for a person before it is rejected
    /// ("nobody answered").
    pub timeout: Duration,
    /// With no approver seen for this long, nothing is held: a call that
    /// needs approval gets APPROVAL_UNAVAILABLE at once.
    pub absent_after: Duration,
    /// Most plans and calls waiting at once, over the whole service.
    pub max_pending: usize,
    /// Most plans and calls one session may have waiting at once.
    pub max_pending_per_session: usize,
}

/// A plan as approved: what the session was granted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovedPlan {
    /// The approval's id.
    pub id: String,
    /// The plan.
    pub plan: Plan,
    /// The planned files the file tools may write.
    pub granted: Vec<String>,
    /// The planned files a rule withholds.
    pub withheld: Vec<Withheld>,
    /// Who approved it, and when.
    pub decision: Decision,
}

/// A call that may wait for approval: done, or rejected and not executed.
#[derive(Debug)]
pub enum Gated<T> {
    /// It ran.
    Done(T),
    /// A person, or nobody in time, rejected it: nothing was executed.
    Rejected(Rejection),
}

/// Why a call or plan was not approved.
#[derive(Debug, Clone)]
pub struct Rejection {
    /// The approval's id.
    pub id: String,
    /// The approver's note, or what ended the wait.
    pub reason: String,
    /// Nobody answered within the operator's timeout.
    pub timed_out: bool,
    /// Who rejected, when a person did.
    pub decision: Option<Decision>,
    /// For the model: what happened and what to do next.
    pub message: String,
}

/// What waits for a person.
#[derive(Debug, Clone)]
pub enum Asked {
    /// A plan, with the files approval would withhold.
    Plan {
        /// The plan as submitted (checked).
        plan: Plan,
        /// Planned files a rule withholds.
        withheld: Vec<Withheld>,
    },
    /// A call an `ask` rule held.
    Call {
        /// The tool.
        tool: &'static str,
        /// Its arguments in brief.
        summary: String,
        /// The rule that asked.
        rule: String,
        /// The path a write lands on (empty for a command).
        path: String,
        /// The command (empty for a write).
        command: String,
        /// What a write would change, for the person to read (capped; see
        /// [`CHANGE_CHARS`]): a new file's content, an edit's old and new
        /// text, a patch. Empty for a command.
        change: String,
    },
}

/// Most characters of a held write's change an approval shows; the rest
/// is counted ("… N more characters").
pub const CHANGE_CHARS: usize = 4000;

impl Asked {
    /// What is asked, in a few words, for the journal.
    pub fn brief(&self) -> String {
        match self {
            Asked::Plan { plan, .. } => format!("plan {:?}", truncate(&plan.goal, 80)),
            Asked::Call { tool, summary, .. } => format!("{tool} {summary}"),
        }
    }
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// One waiting plan or call, as approvers see it.
#[derive(Debug, Clone)]
pub struct Pending {
    /// Its id, for Decide.
    pub id: String,
    /// The session that asks.
    pub session: String,
    /// The session's workspace on the host.
    pub workspace: PathBuf,
    /// When it began to wait.
    pub requested: SystemTime,
    /// When the wait ends in a rejection.
    pub expires: SystemTime,
    /// What is asked.
    pub asked: Asked,
}

/// Who decided, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// "operator" or "approver", and the name they gave.
    pub by: String,
    /// Their note.
    pub note: String,
    /// Milliseconds since the Unix epoch.
    pub at_ms: u64,
}

/// How a wait ended.
#[derive(Debug, Clone)]
pub enum Answer {
    /// A person approved.
    Approved(Decision),
    /// A person rejected.
    Rejected(Decision),
    /// Nobody answered within the operator's timeout.
    TimedOut {
        /// The timeout.
        after: Duration,
    },
    /// The wait was withdrawn (its session closed), in words.
    Withdrawn(&'static str),
}

/// Why nothing can wait for a person now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unavailable {
    /// The session was created unattended.
    Unattended,
    /// No approver was seen within the operator's window.
    NoApprover {
        /// The window.
        absent_after: Duration,
    },
    /// Too many waits already, for the session or in all.
    Full {
        /// The ceiling reached.
        ceiling: usize,
        /// Whether it is the session's ceiling (else the service's).
        per_session: bool,
    },
}

/// A decision that found nothing to decide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotPending {
    /// The id given.
    pub id: String,
}

struct Entry {
    pending: Pending,
    answer: oneshot::Sender<Answer>,
}

#[derive(Default)]
struct Inner {
    /// By arrival order.
    waiting: BTreeMap<u64, Entry>,
    presence: Presence,
}

/// The service's waiting plans and calls.
pub struct Approvals {
    config: ApprovalConfig,
    /// Distinguishes this process's ids from an earlier one's.
    nonce: String,
    next: AtomicU64,
    inner: Mutex<Inner>,
    arrived: Notify,
}

impl std::fmt::Debug for Approvals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Approvals")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// A registered wait: its answer comes through [`Ticket::answer`];
/// dropping it unanswered withdraws the wait.
pub struct Ticket {
    approvals: Arc<Approvals>,
    key: u64,
    /// The id approvers decide by.
    pub id: String,
    /// What is asked, in a few words.
    pub brief: String,
    /// When the wait ends in a rejection.
    pub expires: SystemTime,
    deadline: Instant,
    rx: oneshot::Receiver<Answer>,
    /// The entry is out of the table (answered, or removed at the
    /// deadline); until then, dropping the ticket removes it.
    settled: bool,
}

impl Approvals {
    /// An empty table with the operator's settings.
    pub fn new(config: ApprovalConfig) -> Approvals {
        // 64 random bits: ids of an earlier run of the service never
        // come back.
        let nonce = crate::secret::random_hex()[..16].to_string();
        Approvals {
            config,
            nonce,
            next: AtomicU64::new(1),
            inner: Mutex::new(Inner::default()),
            arrived: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Marks an approver of `scope` as present now.
    pub fn seen(&self, scope: &Scope) {
        self.lock().presence.seen(scope, self.config.absent_after);
    }

    /// Whether a person can answer for `session`, `unattended` or not.
    pub fn available(&self, session: &str, unattended: bool) -> Result<(), Unavailable> {
        if unattended {
            return Err(Unavailable::Unattended);
        }
        let present = self
            .lock()
            .presence
            .present_for(session, self.config.absent_after);
        if present {
            Ok(())
        } else {
            Err(Unavailable::NoApprover {
                absent_after: self.config.absent_after,
            })
        }
    }

    /// Registers `asked` for `session` and returns the ticket to wait on,
    /// or why nobody can answer.
    pub fn ask(
        self: &Arc<Self>,
        session: &str,
        workspace: PathBuf,
        unattended: bool,
        asked: Asked,
    ) -> Result<Ticket, Unavailable> {
        self.available(session, unattended)?;
        let brief = asked.brief();
        let (tx, rx) = oneshot::channel();
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        let id = format!("{}-{key}", self.nonce);
        let now = SystemTime::now();
        let expires = now + self.config.timeout;
        {
            let mut inner = self.lock();
            if inner.waiting.len() >= self.config.max_pending {
                return Err(Unavailable::Full {
                    ceiling: self.config.max_pending,
                    per_session: false,
                });
            }
            let own = inner
                .waiting
                .values()
                .filter(|e| e.pending.session == session)
                .count();
            if own >= self.config.max_pending_per_session {
                return Err(Unavailable::Full {
                    ceiling: self.config.max_pending_per_session,
                    per_session: true,
                });
            }
            inner.waiting.insert(
                key,
                Entry {
                    pending: Pending {
                        id: id.clone(),
                        session: session.to_string(),
                        workspace,
                        requested: now,
                        expires,
                        asked,
                    },
                    answer: tx,
                },
            );
        }
        self.arrived.notify_waiters();
        Ok(Ticket {
            approvals: Arc::clone(self),
            key,
            id,
            brief,
            expires,
            deadline: Instant::now() + self.config.timeout,
            rx,
            settled: false,
        })
    }

    /// What waits now in `scope`, oldest first; waits up to `wait` for
    /// something when nothing does. The caller is an approver of `scope`:
    /// it is marked present for it.
    pub async fn pending(&self, scope: &Scope, wait: Duration) -> Vec<Pending> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut listening = None;
        loop {
            let arrived = self.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            let now = self.snapshot(scope);
            if !now.is_empty() || tokio::time::Instant::now() >= deadline {
                return now;
            }
            if listening.is_none() {
                self.lock().presence.listen(scope);
                listening = Some(scopeguard(|| {
                    let mut inner = self.lock();
                    inner.presence.unlisten(scope);
                    inner.presence.seen(scope, self.config.absent_after);
                }));
            }
            // Woken by any session's wait: listed again, and waited on
            // again if none is in scope.
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                return self.snapshot(scope);
            }
        }
    }

    fn snapshot(&self, scope: &Scope) -> Vec<Pending> {
        let mut inner = self.lock();
        inner.presence.seen(scope, self.config.absent_after);
        inner
            .waiting
            .values()
            .filter(|e| scope.covers(&e.pending.session))
            .map(|e| e.pending.clone())
            .collect()
    }

    /// Decides the wait `id`: approves or rejects it, by `decision`. The
    /// decider is an approver: it is marked present. Answers the session
    /// whose wait it was.
    pub fn decide(
        &self,
        id: &str,
        approve: bool,
        decision: Decision,
    ) -> Result<Pending, NotPending> {
        let entry = {
            let mut inner = self.lock();
            let key = inner
                .waiting
                .iter()
                .find(|(_, e)| e.pending.id == id)
                .map(|(k, _)| *k);
            let entry = key.and_then(|k| inner.waiting.remove(&k));
            // Present for the session it answered, not for every one.
            if let Some(e) = &entry {
                let scope = Scope::Session(e.pending.session.clone());
                inner.presence.seen(&scope, self.config.absent_after);
            }
            entry
        };
        let entry = entry.ok_or_else(|| NotPending { id: id.to_string() })?;
        let answer = if approve {
            Answer::Approved(decision)
        } else {
            Answer::Rejected(decision)
        };
        // The asker left in the instant before: its wait is gone either way.
        entry
            .answer
            .send(answer)
            .map_err(|_| NotPending { id: id.to_string() })?;
        Ok(entry.pending)
    }

    /// Withdraws every wait of `session` (it is closing).
    pub fn withdraw_session(&self, session: &str) {
        let gone: Vec<Entry> = {
            let mut inner = self.lock();
            let keys: Vec<u64> = inner
                .waiting
                .iter()
                .filter(|(_, e)| e.pending.session == session)
                .map(|(k, _)| *k)
                .collect();
            keys.iter()
                .filter_map(|k| inner.waiting.remove(k))
                .collect()
        };
        for entry in gone {
            let _ = entry.answer.send(Answer::Withdrawn("the session closed"));
        }
    }

    /// Whether `session` has a plan or call waiting.
    pub fn waits_for(&self, session: &str) -> bool {
        self.lock()
            .waiting
            .values()
            .any(|e| e.pending.session == session)
    }

    /// Waits in the table now.
    pub fn len(&self) -> usize {
        self.lock().waiting.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Ticket {
    /// Waits for the answer: a decision, the timeout (a rejection), or a
    /// withdrawal.
    pub async fn answer(mut self) -> Answer {
        let deadline = tokio::time::Instant::from_std(self.deadline);
        let answer = match tokio::time::timeout_at(deadline, &mut self.rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Answer::Withdrawn("the service is stopping"),
            Err(_) => {
                let removed = self.approvals.lock().waiting.remove(&self.key);
                match removed {
                    Some(_) => Answer::TimedOut {
                        after: self.approvals.config.timeout,
                    },
                    // Decided in the very instant it expired: the decision
                    // stands.
                    None => self
                        .rx
                        .try_recv()
                        .unwrap_or(Answer::Withdrawn("the wait was withdrawn")),
                }
            }
        };
        // Whoever sent the answer took the entry out of the table.
        self.settled = true;
        answer
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        // Dropped unanswered, waiting or not: the wait is withdrawn.
        if !self.settled {
            self.approvals.lock().waiting.remove(&self.key);
        }
    }
}

/// Runs `f` when dropped.
fn scopeguard<F: FnOnce()>(f: F) -> impl Drop {
    struct Guard<F: FnOnce()>(Option<F>);
    impl<F: FnOnce()> Drop for Guard<F> {
        fn drop(&mut self) {
            if let Some(f) = self.0.take() {
                f();
            }
        }
    }
    Guard(Some(f))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn approvals(timeout_ms: u64) -> Arc<Approvals> {
        Arc::new(Approvals::new(ApprovalConfig {
            timeout: Duration::from_millis(timeout_ms),
            absent_after: Duration::from_secs(60),
            max_pending: 3,
            max_pending_per_session: 2,
        }))
    }

    fn call() -> Asked {
        Asked::Call {
            tool: "EditFile",
            summary: "src/a.py".into(),
            rule: "ask_writes \"src/**\"".into(),
            path: "src/a.py".into(),
            command: String::new(),
            change: String::new(),
        }
    }

    fn by(name: &str) -> Decision {
        Decision {
            by: name.into(),
            note: "ok".into(),
            at_ms: 1,
        }
    }

    #[tokio::test]
    async fn nothing_waits_without_an_approver_or_when_unattended() {
        let a = approvals(1000);
        assert!(matches!(
            a.ask("s", PathBuf::new(), false, call()),
            Err(Unavailable::NoApprover { .. })
        ));
        a.seen(&Scope::All);
        assert!(matches!(
            a.ask("s", PathBuf::new(), true, call()),
            Err(Unavailable::Unattended)
        ));
        assert!(a.ask("s", PathBuf::new(), false, call()).is_ok());
    }

    #[tokio::test]
    async fn a_decision_reaches_the_asker_and_only_once() {
        let a = approvals(10_000);
        a.seen(&Scope::All);
        let ticket = a.ask("s", PathBuf::new(), false, call()).unwrap();
        let id = ticket.id.clone();
        assert_eq!(a.pending(&Scope::All, Duration::ZERO).await.len(), 1);
        a.decide(&id, true, by("operator")).unwrap();
        assert!(matches!(ticket.answer().await, Answer::Approved(d) if d.by == "operator"));
        assert!(matches!(a.decide(&id, false, by("x")), Err(NotPending { id: i }) if i == id));
        assert!(a.is_empty());
    }

    #[tokio::test]
    async fn an_unanswered_wait_is_a_rejection() {
        let a = approvals(50);
        a.seen(&Scope::All);
        let ticket = a.ask("s", PathBuf::new(), false, call()).unwrap();
        assert!(matches!(ticket.answer().await, Answer::TimedOut { .. }));
        assert!(a.is_empty());
    }

    #[tokio::test]
    async fn a_caller_that_leaves_withdraws_its_wait() {
        let a = approvals(10_000);
        a.seen(&Scope::All);
        let ticket = a.ask("s", PathBuf::new(), false, call()).unwrap();
        let id = ticket.id.clone();
        drop(ticket);
        assert!(a.is_empty());
        assert!(a.decide(&id, true, by("x")).is_err());
    }

    #[tokio::test]
    async fn a_caller_that_leaves_mid_wait_withdraws_it() {
        let a = approvals(10_000);
        a.seen(&Scope::All);
        let ticket = a.ask("s", PathBuf::new(), false, call()).unwrap();
        let id = ticket.id.clone();
        let waiting = tokio::spawn(ticket.answer());
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(a.len(), 1);
        waiting.abort();
        let _ = waiting.await;
        assert!(a.is_empty(), "the wait was withdrawn");
        assert!(a.decide(&id, true, by("x")).is_err());
    }

    #[tokio::test]
    async fn waits_are_bounded_per_session_and_in_all() {
        let a = approvals(10_000);
        a.seen(&Scope::All);
        let _one = a.ask("s", PathBuf::new(), false, call()).unwrap();
        let _two = a.ask("s", PathBuf::new(), false, call()).unwrap();
        assert!(matches!(
            a.ask("s", PathBuf::new(), false, call()),
            Err(Unavailable::Full {
                per_session: true,
                ..
            })
        ));
        let _three = a.ask("t", PathBuf::new(), false, call()).unwrap();
        assert!(matches!(
            a.ask("u", PathBuf::new(), false, call()),
            Err(Unavailable::Full {
                per_session: false,
                ..
            })
        ));
    }

    #[tokio::test]
    async fn a_listening_approver_is_woken_by_a_new_wait() {
        let a = approvals(10_000);
        a.seen(&Scope::All);
        let listener = {
            let a = std::sync::Arc::clone(&a);
            tokio::spawn(async move { a.pending(&Scope::All, Duration::from_secs(30)).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        let ticket = a.ask("s", PathBuf::new(), false, call()).unwrap();
        let seen = tokio::time::timeout(Duration::from_secs(5), listener)
            .await
            .expect("woken")
            .unwrap();
        assert_eq!(seen.len(), 1);
        a.withdraw_session("s");
        assert!(matches!(ticket.answer().await, Answer::Withdrawn(_)));
    }

    #[tokio::test]
    async fn an_approver_of_one_session_holds_nothing_of_another() {
        let a = approvals(10_000);
        let own = Scope::Session("mine".into());
        let listener = {
            let a = std::sync::Arc::clone(&a);
            let own = own.clone();
            tokio::spawn(async move { a.pending(&own, Duration::from_secs(30)).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        // Another session's call is refused at once: nobody answers for it.
        assert!(matches!(
            a.ask("other", PathBuf::new(), false, call()),
            Err(Unavailable::NoApprover { .. })
        ));
        // Its own is held, and only it reaches the listener.
        a.seen(&Scope::All);
        let _theirs = a.ask("other", PathBuf::new(), false, call()).unwrap();
        let mine = a.ask("mine", PathBuf::new(), false, call()).unwrap();
        let seen = tokio::time::timeout(Duration::from_secs(5), listener)
            .await
            .expect("woken")
            .unwrap();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].id, mine.id);
        assert_eq!(a.pending(&own, Duration::ZERO).await.len(), 1);
        assert_eq!(a.pending(&Scope::All, Duration::ZERO).await.len(), 2);
    }

    #[test]
    fn ids_carry_64_random_bits() {
        let one = approvals(1000);
        let two = approvals(1000);
        assert_eq!(one.nonce.len(), 16);
        assert_ne!(one.nonce, two.nonce);
    }
}
