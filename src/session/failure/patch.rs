//! What a caller is told when a patch cannot be read or one of its hunks
//! does not apply: part of the one table in [`super`].

use tonic::Code;

use super::{Described, reason, status};
use crate::workspace;

pub(super) const PATCH_UNCHANGED: &str = "Nothing was changed: no file of the patch was written.";

pub(super) fn parse_status(err: &workspace::patch::ParseError) -> Described {
    use workspace::patch::ParseError;
    const NONE: &str = PATCH_UNCHANGED;
    match err {
        ParseError::Malformed { line, why } => status(
            Code::InvalidArgument,
            reason::PATCH_MALFORMED,
            format!(
                "The patch cannot be read at its line {line}: {why}. {NONE} Send a unified diff as \
                 `git diff` writes it: `--- a/PATH`, `+++ b/PATH`, then `@@ -l,s +l,s @@` hunks whose \
                 line counts match their bodies."
            ),
            &[("line", line.to_string())],
        ),
        ParseError::Unsupported { path, what } => status(
            Code::InvalidArgument,
            reason::PATCH_UNSUPPORTED,
            format!(
                "{path}: {what} cannot be applied. {NONE} Change binary files with a command or \
                 UploadArchive, and copies as a created file."
            ),
            &[("path", path.clone())],
        ),
    }
}

pub(super) fn hunk_status(path: &str, error: &workspace::patch::HunkError) -> Described {
    use workspace::patch::Mismatch;
    const NONE: &str = PATCH_UNCHANGED;
    let path = path.to_string();
    let expected = error.expected.join("\n");
    match &error.why {
        Mismatch::NotFound {
            at,
            found,
            past_end,
        } => {
            let there = if *past_end && found.is_empty() {
                format!("the file ends before line {at}")
            } else {
                format!(
                    "lines {at}-{} hold instead:\n{}{}",
                    at + found.len().saturating_sub(1),
                    found.join("\n"),
                    if *past_end {
                        "\n(and then the file ends)"
                    } else {
                        ""
                    }
                )
            };
            status(
                Code::FailedPrecondition,
                reason::PATCH_CONTEXT_MISMATCH,
                format!(
                    "Hunk {} of {path} ({}) does not match the file: its context and removed \
                             lines were not found at line {at} nor anywhere after the previous hunk. \
                             The hunk expects:\n{expected}\nbut {there}\n{NONE} Read the file again and \
                             make the patch against what it holds now.",
                    error.hunk, error.header
                ),
                &[("path", path.clone()), ("hunk", error.hunk.to_string())],
            )
        }
        Mismatch::SearchBudget { limit } => status(
            Code::ResourceExhausted,
            reason::PATCH_SEARCH_BUDGET,
            format!(
                "Hunk {} of {path} ({}) is not where it says, and looking for the patch's hunks \
                 away from where they say passed the search budget of one patch ({limit} line \
                 comparisons). {NONE} Make the patch against the files as they are now, so that \
                 its line numbers are right, or send it in smaller parts.",
                error.hunk, error.header
            ),
            &[
                ("path", path.clone()),
                ("hunk", error.hunk.to_string()),
                ("limit", limit.to_string()),
            ],
        ),
        Mismatch::Ambiguous { at } => {
            let lines: Vec<String> = at.iter().map(|l| l.to_string()).collect();
            status(
                Code::FailedPrecondition,
                reason::PATCH_CONTEXT_AMBIGUOUS,
                format!(
                    "Hunk {} of {path} ({}) does not match where it says, and its lines occur \
                             at {} places (lines {}). {NONE} Give the hunk more context lines, or the \
                             right line numbers, so that it names one place.",
                    error.hunk,
                    error.header,
                    at.len(),
                    lines.join(", ")
                ),
                &[("path", path.clone()), ("hunk", error.hunk.to_string())],
            )
        }
    }
}
