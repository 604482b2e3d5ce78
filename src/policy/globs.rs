//! Globs as policy rules match them: case-insensitive, `*` within one path
//! component, a glob without `/` matching names at any depth, and a path
//! matching when it or one of its ancestor directories does.

use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};

use super::InvalidRules;

/// Globs compiled for matching, with their text for refusals.
#[derive(Debug, Clone)]
pub(super) struct Globs {
    text: Vec<String>,
    set: GlobSet,
}

impl Globs {
    pub(super) fn new(field: &'static str, globs: &[String]) -> Result<Globs, InvalidRules> {
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
    pub(super) fn matching(&self, path: &str) -> Option<&str> {
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
pub(super) fn compile(field: &'static str, glob: &str) -> Result<Glob, InvalidRules> {
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
