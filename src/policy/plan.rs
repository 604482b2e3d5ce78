//! What a checkable plan holds: a goal, steps that name the files they
//! write, the command that verifies the result, and the risks. A plan that
//! lacks one is refused whole, with everything it lacks named at once; it
//! is never patched up. Its files are workspace-relative paths, exact (no
//! globs), normalised the way the journal records writes.

use serde::{Deserialize, Serialize};

/// Most steps a plan may have.
pub const MAX_STEPS: usize = 200;
/// Most files a plan may name, all steps together.
pub const MAX_FILES: usize = 2000;
/// Most bytes of text in a plan, all fields together.
pub const MAX_BYTES: usize = 256 * 1024;

/// One step of a plan.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    /// What the step does.
    pub description: String,
    /// Files it writes.
    pub files: Vec<String>,
}

/// A plan as submitted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// What the plan is for.
    pub goal: String,
    /// What will be done, in order.
    pub steps: Vec<Step>,
    /// The command whose passing run verifies the result.
    pub verification: String,
    /// What could go wrong.
    pub risks: Vec<String>,
}

impl Plan {
    /// The plan with its files normalised, or everything it lacks, in
    /// words (one item each).
    pub fn checked(mut self) -> Result<Plan, Vec<String>> {
        let mut problems = Vec::new();
        if self.goal.trim().is_empty() {
            problems.push("the goal is empty: say what the plan is for".to_string());
        }
        if self.steps.is_empty() {
            problems.push("there are no steps".to_string());
        } else if self.steps.len() > MAX_STEPS {
            problems.push(format!(
                "it has {} steps; at most {MAX_STEPS}",
                self.steps.len()
            ));
        }
        let mut files = 0usize;
        for (i, step) in self.steps.iter_mut().enumerate() {
            if step.description.trim().is_empty() {
                problems.push(format!("step {} has no description", i + 1));
            }
            for file in step.files.iter_mut() {
                files += 1;
                match normalise(file) {
                    Ok(n) => *file = n,
                    Err(why) => problems.push(format!(
                        "step {}: file \"{}\" {why}",
                        i + 1,
                        crate::text::one_line(file)
                    )),
                }
            }
        }
        if files == 0 && !self.steps.is_empty() {
            problems.push(
                "no step lists the files it writes (the file list is what approval grants)"
                    .to_string(),
            );
        }
        if files > MAX_FILES {
            problems.push(format!("it names {files} files; at most {MAX_FILES}"));
        }
        if self.verification.trim().is_empty() {
            problems.push(
                "the verification is empty: name the command that shows the change works, \
                 e.g. \"pytest -q\""
                    .to_string(),
            );
        } else if self.verification.contains('\0') {
            problems.push("the verification contains a NUL byte".to_string());
        }
        if self.text_bytes() > MAX_BYTES {
            problems.push(format!(
                "it holds {} bytes of text; at most {MAX_BYTES}",
                self.text_bytes()
            ));
        }
        if problems.is_empty() {
            self.verification = self.verification.trim().to_string();
            Ok(self)
        } else {
            Err(problems)
        }
    }

    /// Every file of every step, once each, in the order first named.
    pub fn files(&self) -> Vec<String> {
        let mut seen = std::collections::BTreeSet::new();
        self.steps
            .iter()
            .flat_map(|s| s.files.iter())
            .filter(|f| seen.insert(f.as_str()))
            .cloned()
            .collect()
    }

    fn text_bytes(&self) -> usize {
        self.goal.len()
            + self.verification.len()
            + self.risks.iter().map(String::len).sum::<usize>()
            + self
                .steps
                .iter()
                .map(|s| s.description.len() + s.files.iter().map(String::len).sum::<usize>())
                .sum::<usize>()
    }
}

/// A planned file as the journal records writes: relative, `/`-separated,
/// without `.` components; or why it cannot be one.
fn normalise(file: &str) -> Result<String, &'static str> {
    if file.contains('\0') {
        return Err("contains a NUL byte");
    }
    // A person approves the file list by reading it: a name holding a
    // character that does not show as itself (a control, a line separator,
    // a bidirectional or zero-width character) reads as another file.
    if file.contains(crate::text::hidden) {
        return Err(
            "holds a control, line-separator, bidirectional or invisible character; \
             a plan names files as they read",
        );
    }
    if file.trim() != file {
        return Err("begins or ends with white space; name the file exactly");
    }
    if file.starts_with('/') {
        return Err("is absolute; name it relative to the workspace root");
    }
    if file.ends_with('/') {
        return Err("is a directory; name each file");
    }
    let mut parts = Vec::new();
    for part in file.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err("leaves the workspace (\"..\")"),
            p if p.contains(['*', '?', '[', '{']) => {
                return Err("is a glob; a plan names exact files");
            }
            p => parts.push(p),
        }
    }
    if parts.is_empty() {
        return Err("is empty");
    }
    Ok(parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(files: &[&str], verification: &str) -> Plan {
        Plan {
            goal: "fix the parser".into(),
            steps: vec![Step {
                description: "edit it".into(),
                files: files.iter().map(|f| f.to_string()).collect(),
            }],
            verification: verification.into(),
            risks: vec![],
        }
    }

    #[test]
    fn a_plan_without_files_or_verification_names_both() {
        let problems = plan(&[], "  ").checked().unwrap_err();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("files"), "{problems:?}");
        assert!(problems[1].contains("verification"), "{problems:?}");
    }

    #[test]
    fn files_are_normalised_and_globs_refused() {
        let ok = plan(&["./src//a.py", "src/./b.py", "src/a.py"], " pytest -q ")
            .checked()
            .unwrap();
        assert_eq!(ok.files(), vec!["src/a.py", "src/b.py"]);
        assert_eq!(ok.verification, "pytest -q");
        for bad in [
            "/etc/passwd",
            "../x",
            "src/*.py",
            "src/",
            "a\0b",
            ".",
            " /etc/passwd",
            "src/ ",
            " a.py",
        ] {
            let problems = plan(&[bad], "pytest").checked().unwrap_err();
            assert_eq!(problems.len(), 1, "{bad:?}: {problems:?}");
        }
    }

    #[test]
    fn files_whose_names_do_not_read_as_they_are_are_refused() {
        for bad in [
            "x\x1b]0;T\x07y.txt",
            "invoice\u{202e}txt.exe",
            "README.md\u{2028}Withheld: (none)",
            "tests\u{200b}/test_x.py",
            "a\u{feff}.py",
            "a\u{85}.py",
            "a\nb.py",
        ] {
            let problems = plan(&[bad], "pytest").checked().unwrap_err();
            assert_eq!(problems.len(), 1, "{bad:?}: {problems:?}");
            assert!(
                !problems[0].contains(crate::text::hidden),
                "the refusal shows the name escaped: {problems:?}"
            );
        }
        assert!(plan(&["src/caf\u{e9}.py"], "pytest").checked().is_ok());
    }

    #[test]
    fn oversized_plans_are_refused() {
        let many: Vec<String> = (0..=MAX_FILES).map(|i| format!("f{i}")).collect();
        let refs: Vec<&str> = many.iter().map(String::as_str).collect();
        let problems = plan(&refs, "true").checked().unwrap_err();
        assert!(problems.iter().any(|p| p.contains("files")), "{problems:?}");
    }
}
