//! The policy's decisions: deny, allow, ask, plan mode and grants.
use super::*;

fn policy(operator: &[&str], asked: Rules) -> Policy {
    let operator = Rules {
        deny_writes: operator.iter().map(|s| s.to_string()).collect(),
        ..Rules::default()
    };
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
    // No plan is taken, so none can lift it.
    assert!(matches!(
        p.check_plan(),
        Err(Denial::ReadOnly { tool: "SubmitPlan" })
    ));
}

/// Plan mode refuses every mutation as read-only does, but takes a plan.
#[test]
fn plan_mode_refuses_every_mutation_until_a_plan() {
    let p = policy(
        &[],
        Rules {
            plan_mode: true,
            ..Rules::default()
        },
    );
    assert!(matches!(
        p.check_write("EditFile", "a.txt"),
        Err(Denial::PlanMode { tool: "EditFile" })
    ));
    assert!(matches!(
        p.check_command("ls"),
        Err(CommandDenied::Policy(Denial::PlanMode { .. }))
    ));
    assert!(p.check_plan().is_ok());
    // A session both read-only and in plan mode stays read-only.
    let both = policy(
        &[],
        Rules {
            read_only: true,
            plan_mode: true,
            ..Rules::default()
        },
    );
    assert!(both.check_plan().is_err());
    let (granted, _) = both.granting(&strings(&["a.txt"]));
    assert!(granted.read_only, "a plan never lifts read_only");
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
        Rules {
            ask_commands: strings(&["("]),
            ..Rules::default()
        },
        Rules {
            ask_writes: strings(&["../x"]),
            ..Rules::default()
        },
        Rules {
            ask_tools: strings(&["ReadFile"]),
            ..Rules::default()
        },
    ] {
        assert!(
            Policy::new(&Rules::default(), &guard, asked.clone()).is_err(),
            "{asked:?}"
        );
    }
}

#[test]
fn ask_rules_hold_writes_and_commands_until_approved() {
    let p = policy(
        &["secrets/**"],
        Rules {
            ask_writes: strings(&["src/**", "secrets/**"]),
            ask_commands: strings(&[r"^make\s+deploy\b"]),
            ..Rules::default()
        },
    );
    let asked = p.check_write("EditFile", "src/a.py").unwrap_err();
    assert_eq!(
        asked,
        Denial::NeedsApproval {
            tool: "EditFile",
            path: "src/a.py".into(),
            rule: "ask_writes \"src/**\"".into(),
        }
    );
    assert!(p.check_write("EditFile", "README.md").is_ok());
    // A deny wins over an ask, approved or not.
    let approved = p.approving_path("secrets/key");
    assert!(matches!(
        approved.check_write("EditFile", "secrets/key"),
        Err(Denial::DeniedPath { .. })
    ));
    // An approval covers that one path only.
    let approved = p.approving_path("src/a.py");
    assert!(approved.check_write("EditFile", "src/a.py").is_ok());
    assert!(approved.check_write("EditFile", "src/b.py").is_err());
    assert!(matches!(
        p.check_command("make deploy prod"),
        Err(CommandDenied::Policy(Denial::NeedsApproval { .. }))
    ));
    assert!(p.check_command("make test").is_ok());
    assert!(p.approving_command().check_command("make deploy").is_ok());
    // The slip guard still refuses an approved command.
    assert!(matches!(
        p.approving_command().check_command("git push"),
        Err(CommandDenied::Guard(_))
    ));
}

#[test]
fn ask_tools_hold_every_call_of_the_tool() {
    let p = policy(
        &[],
        Rules {
            ask_tools: strings(&["runcommand", "CreateFile"]),
            ..Rules::default()
        },
    );
    assert!(p.check_command("true").is_err());
    assert!(p.check_write("CreateFile", "a").is_err());
    assert!(p.check_write("EditFile", "a").is_ok());
}

#[test]
fn an_approved_plan_grants_exactly_its_files_never_a_denied_one() {
    let plan_mode = policy(
        &["ci/**"],
        Rules {
            plan_mode: true,
            deny_writes: strings(&["tests/**"]),
            ask_writes: strings(&["src/**"]),
            ..Rules::default()
        },
    );
    assert!(plan_mode.check_write("EditFile", "src/a.py").is_err());
    let files = strings(&["src/a.py", "tests/test_x.py", "ci/run", "setup.py"]);
    let withheld = plan_mode.withheld(&files);
    assert_eq!(
        withheld,
        vec![
            Withheld {
                path: "tests/test_x.py".into(),
                rule: "deny_writes \"tests/**\"".into()
            },
            Withheld {
                path: "ci/run".into(),
                rule: "deny_writes \"ci/**\"".into()
            },
        ]
    );
    assert!(plan_mode.check_plan().is_ok());
    let (granted, files) = plan_mode.granting(&files);
    assert!(!granted.plan_mode);
    assert_eq!(files, strings(&["setup.py", "src/a.py"]));
    assert_eq!(granted.plan_files, Some(files));
    let operator = Rules {
        deny_writes: strings(&["ci/**"]),
        ..Rules::default()
    };
    let p = Policy::new(&operator, &SlipGuard::new(true, &[]).unwrap(), granted).unwrap();
    // Planned files were approved with the plan: no second ask.
    assert!(p.check_write("EditFile", "src/a.py").is_ok());
    assert!(p.check_write("CreateFile", "setup.py").is_ok());
    assert_eq!(
        p.check_write("EditFile", "src/b.py"),
        Err(Denial::NotInPlan {
            path: "src/b.py".into()
        })
    );
    assert!(matches!(
        p.check_write("EditFile", "tests/test_x.py"),
        Err(Denial::DeniedPath { .. })
    ));
    // Commands run once the plan is approved (its verification must).
    assert!(p.check_command("pytest -q").is_ok());
}
