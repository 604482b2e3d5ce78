//! Session policy: what a session may write and run, decided here and
//! nowhere else.
//!
//! A policy is the operator's rules plus the session's own, and the two only
//! ever narrow each other: a session can add deny globs, guard patterns or
//! make itself read-only, never lift what the operator set. Within a policy a
//! deny always wins over a grant (`allow_writes`), whatever the order.
//!
//! Write rules are matched against the path a write really lands on (symlinks
//! resolved, no `..`), case-insensitively, and against every ancestor
//! directory of it, so `tests` denies `tests/unit/test_x.py` and `TESTS/x.py`.
//! The file tools call [`Policy::check_write`] under the path's write lock
//! with the resolved path, so nothing can be swapped in between check and
//! write.
//!
//! Commands are decided by [`Policy::check_command`]: read-only sessions run
//! none, and the slip guard ([`guard`]) refuses obvious slips.

pub mod guard;

use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};

use guard::{Refusal, SlipGuard};

/// What a session asks for at creation.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Rules {
    /// Reading, listing, finding and searching only.
    pub read_only: bool,
    /// Globs of workspace paths the file tools must not write.
    pub deny_writes: Vec<String>,
    /// When non-empty, the file tools may write only paths matching one.
    pub allow_writes: Vec<String>,
    /// Extra regular expressions the slip guard refuses.
    pub guard_patterns: Vec<String>,
}

/// Why a call was refused by policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denial {
    /// The session is read-only and the call would change something.
    ReadOnly {
        /// The refused tool.
        tool: &'static str,
    },
    /// The path matches a deny glob.
    DeniedPath {
        /// Workspace-relative path the write would land on.
        path: String,
        /// The glob that matched.
        glob: String,
    },
    /// `allow_writes` is set and no glob of it matches the path.
    NotGranted {
        /// Workspace-relative path the write would land on.
        path: String,
    },
}

/// A rule set that does not compile.
#[derive(Debug, thiserror::Error)]
pub enum InvalidRules {
    /// A glob does not parse.
    #[error("{field}: glob {glob:?} does not parse: {why}")]
    Glob {
        /// The request field.
        field: &'static str,
        /// The glob.
        glob: String,
        /// Parser message.
        why: String,
    },
    /// A guard pattern does not parse.
    #[error("guard_patterns: {0}")]
    Pattern(#[from] regex::Error),
}

/// Globs compiled for matching, with their text for refusals.
#[derive(Debug, Clone)]
struct Globs {
    text: Vec<String>,
    set: GlobSet,
}

impl Globs {
    fn new(field: &'static str, globs: &[String]) -> Result<Globs, InvalidRules> {
        let mut set = GlobSetBuilder::new();
        for g in globs {
            set.add(compile(field, g)?);
        }
        let set = set.build().map_err(|e| InvalidRules::Glob {
            field,
            glob: globs.join(", "),
            why: e.to_string(),
        })?;
        Ok(Globs {
            text: globs.to_vec(),
            set,
        })
    }

    /// The first glob matching `path` or one of its ancestor directories.
    fn matching(&self, path: &str) -> Option<&str> {
        let mut candidate = path;
        loop {
            if let Some(&i) = self.set.matches(candidate).first() {
                return Some(&self.text[i]);
            }
            match candidate.rfind('/') {
                Some(cut) => candidate = &candidate[..cut],
                None => return None,
            }
        }
    }
}

/// Compiles one glob: case-insensitive, `*` stays within a path component,
/// and a glob without `/` matches names at any depth (like FindFiles).
fn compile(field: &'static str, glob: &str) -> Result<Glob, InvalidRules> {
    let invalid = |why: String| InvalidRules::Glob {
        field,
        glob: glob.to_string(),
        why,
    };
    let trimmed = glob.trim_start_matches("./").trim_end_matches('/');
    if trimmed.is_empty() || trimmed.contains('\0') {
        return Err(invalid("it is empty".to_string()));
    }
    if trimmed.starts_with('/') || trimmed.split('/').any(|c| c == "..") {
        return Err(invalid(
            "globs are relative to the workspace root, without \"..\"".to_string(),
        ));
    }
    let full = if trimmed.contains('/') {
        trimmed.to_string()
    } else {
        format!("**/{trimmed}")
    };
    GlobBuilder::new(&full)
        .case_insensitive(true)
        .literal_separator(true)
        .build()
        .map_err(|e| invalid(e.kind().to_string()))
}

/// The rules in force for one session.
#[derive(Debug, Clone)]
pub struct Policy {
    rules: Rules,
    deny: Globs,
    allow: Option<Globs>,
    guard: SlipGuard,
}

impl Policy {
    /// The operator's deny globs and guard, narrowed by the session's `asked`
    /// rules.
    pub fn new(
        operator_deny: &[String],
        guard: &SlipGuard,
        asked: Rules,
    ) -> Result<Policy, InvalidRules> {
        let mut deny_text = operator_deny.to_vec();
        for g in &asked.deny_writes {
            if !deny_text.contains(g) {
                deny_text.push(g.clone());
            }
        }
        let deny = Globs::new("deny_writes", &deny_text)?;
        let allow = if asked.allow_writes.is_empty() {
            None
        } else {
            Some(Globs::new("allow_writes", &asked.allow_writes)?)
        };
        let guard = guard.with_patterns(&asked.guard_patterns, "session")?;
        Ok(Policy {
            rules: Rules {
                deny_writes: deny_text,
                ..asked
            },
            deny,
            allow,
            guard,
        })
    }

    /// The rules in force (the operator's deny globs included).
    pub fn rules(&self) -> &Rules {
        &self.rules
    }

    /// Refuses `tool` outright when the session is read-only.
    pub fn check_mutation(&self, tool: &'static str) -> Result<(), Denial> {
        if self.rules.read_only {
            return Err(Denial::ReadOnly { tool });
        }
        Ok(())
    }

    /// Decides a write by `tool` to `path`, the workspace-relative path the
    /// write really lands on.
    pub fn check_write(&self, tool: &'static str, path: &str) -> Result<(), Denial> {
        self.check_mutation(tool)?;
        if let Some(glob) = self.deny.matching(path) {
            return Err(Denial::DeniedPath {
                path: path.to_string(),
                glob: glob.to_string(),
            });
        }
        match &self.allow {
            Some(allow) if allow.matching(path).is_none() => Err(Denial::NotGranted {
                path: path.to_string(),
            }),
            _ => Ok(()),
        }
    }

    /// Decides a command: read-only sessions run none; the slip guard (the
    /// operator's rules plus the session's patterns) refuses slips.
    pub fn check_command(&self, command: &str) -> Result<(), CommandDenied> {
        self.check_mutation("RunCommand")
            .map_err(CommandDenied::Policy)?;
        self.guard.check(command).map_err(CommandDenied::Guard)
    }
}

/// Why a command may not run.
#[derive(Debug, Clone)]
pub enum CommandDenied {
    /// Session policy (read-only).
    Policy(Denial),
    /// The slip guard.
    Guard(Refusal),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(operator: &[&str], asked: Rules) -> Policy {
        let operator: Vec<String> = operator.iter().map(|s| s.to_string()).collect();
        Policy::new(&operator, &SlipGuard::new(true, &[]).unwrap(), asked).unwrap()
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn deny_globs_cover_descendants_and_any_case() {
        let p = policy(
            &[],
            Rules {
                deny_writes: strings(&["tests/**", "*.lock", "ci"]),
                ..Rules::default()
            },
        );
        for path in [
            "tests/test_x.py",
            "tests/unit/deep/a.py",
            "TESTS/x.py",
            "Tests/Unit/x.py",
            "Cargo.lock",
            "sub/dir/yarn.LOCK",
            "ci/run",
            "CI/deep/run",
        ] {
            assert!(
                matches!(
                    p.check_write("EditFile", path),
                    Err(Denial::DeniedPath { .. })
                ),
                "{path} should be denied"
            );
        }
        for path in ["src/tests.py", "testsuite/x.py", "src/ci.py", "lockfile"] {
            assert!(p.check_write("EditFile", path).is_ok(), "{path} allowed");
        }
    }

    #[test]
    fn a_grant_never_overrides_a_deny() {
        let p = policy(
            &["secrets/**"],
            Rules {
                deny_writes: strings(&["tests/**"]),
                allow_writes: strings(&["**", "tests/**", "secrets/**"]),
                ..Rules::default()
            },
        );
        assert!(p.check_write("CreateFile", "src/a.py").is_ok());
        assert!(p.check_write("CreateFile", "tests/a.py").is_err());
        assert!(p.check_write("CreateFile", "secrets/key").is_err());
        assert_eq!(p.rules().deny_writes, strings(&["secrets/**", "tests/**"]));
    }

    #[test]
    fn allow_writes_limits_writes_to_its_globs() {
        let p = policy(
            &[],
            Rules {
                allow_writes: strings(&["src/**"]),
                ..Rules::default()
            },
        );
        assert!(p.check_write("EditFile", "src/deep/a.rs").is_ok());
        assert!(matches!(
            p.check_write("EditFile", "README.md"),
            Err(Denial::NotGranted { .. })
        ));
    }

    #[test]
    fn read_only_refuses_every_mutation() {
        let p = policy(
            &[],
            Rules {
                read_only: true,
                allow_writes: strings(&["**"]),
                ..Rules::default()
            },
        );
        assert!(matches!(
            p.check_write("EditFile", "a.txt"),
            Err(Denial::ReadOnly { tool: "EditFile" })
        ));
        assert!(matches!(
            p.check_command("ls"),
            Err(CommandDenied::Policy(Denial::ReadOnly { .. }))
        ));
    }

    #[test]
    fn session_guard_patterns_add_to_the_operators() {
        let p = policy(
            &[],
            Rules {
                guard_patterns: strings(&[r"\bpip\s+install\b"]),
                ..Rules::default()
            },
        );
        assert!(matches!(
            p.check_command("pip install x"),
            Err(CommandDenied::Guard(_))
        ));
        assert!(matches!(
            p.check_command("git push"),
            Err(CommandDenied::Guard(_))
        ));
        assert!(p.check_command("pytest -q").is_ok());
    }

    #[test]
    fn bad_rules_are_refused() {
        let guard = SlipGuard::new(true, &[]).unwrap();
        for asked in [
            Rules {
                deny_writes: strings(&["../x"]),
                ..Rules::default()
            },
            Rules {
                deny_writes: strings(&["/etc/**"]),
                ..Rules::default()
            },
            Rules {
                deny_writes: strings(&[""]),
                ..Rules::default()
            },
            Rules {
                allow_writes: strings(&["a[b"]),
                ..Rules::default()
            },
            Rules {
                guard_patterns: strings(&["("]),
                ..Rules::default()
            },
        ] {
            assert!(
                Policy::new(&[], &guard, asked.clone()).is_err(),
                "{asked:?}"
            );
        }
    }
}
