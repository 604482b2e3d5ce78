//! What a caller is told when an edit of a file cannot be made: part of
//! the one table in [`super`].

use tonic::Code;

use super::{Described, UNCHANGED, reason, status, workspace_status};
use crate::workspace::{self, EditError, LineEndings};

pub(super) fn edit_status(path: &str, err: &EditError) -> Described {
    match err {
        EditError::NoEdits => status(
            Code::InvalidArgument,
            reason::NO_EDITS,
            format!(
                "No edits were given for {path}. {UNCHANGED} Pass at least one edit with old_string and new_string."
            ),
            &[("path", path.to_string())],
        ),
        EditError::EmptyOldString { which } => status(
            Code::InvalidArgument,
            reason::EMPTY_OLD_STRING,
            format!(
                "old_string{which} is empty. {UNCHANGED} Copy the exact text to replace from the file; \
                 to make a new file use CreateFile."
            ),
            &[
                ("path", path.to_string()),
                ("edit_index", which.index.to_string()),
            ],
        ),
        EditError::NoChange { which } => status(
            Code::InvalidArgument,
            reason::NO_CHANGE,
            format!(
                "old_string and new_string{which} are identical, so the edit would change nothing. {UNCHANGED}"
            ),
            &[
                ("path", path.to_string()),
                ("edit_index", which.index.to_string()),
            ],
        ),
        EditError::NotFound { which, endings } => {
            let hint = match endings {
                LineEndings::Mixed => {
                    " The file mixes CRLF and LF line endings, so old_string must match its line endings byte for byte."
                }
                LineEndings::Lf | LineEndings::Crlf => "",
            };
            status(
                Code::FailedPrecondition,
                reason::OLD_STRING_NOT_FOUND,
                format!(
                    "old_string{which} cannot be found in {path}. {UNCHANGED} The file may have changed since you \
                     read it, or old_string differs in whitespace or indentation.{hint} Read the file again and copy \
                     old_string exactly."
                ),
                &[
                    ("path", path.to_string()),
                    ("edit_index", which.index.to_string()),
                ],
            )
        }
        EditError::Ambiguous {
            which,
            count,
            lines,
        } => {
            let listed = lines
                .iter()
                .map(|l| l.to_string())
                .collect::<Vec<_>>()
                .join(", ");
            let more = if *count > lines.len() { ", ..." } else { "" };
            status(
                Code::FailedPrecondition,
                reason::OLD_STRING_AMBIGUOUS,
                format!(
                    "old_string{which} occurs {count} times in {path} (lines {listed}{more}). {UNCHANGED} Include more \
                     surrounding lines in old_string so it matches exactly one place, or set replace_all to change \
                     every occurrence."
                ),
                &[
                    ("path", path.to_string()),
                    ("edit_index", which.index.to_string()),
                    ("count", count.to_string()),
                    ("lines", listed.clone()),
                ],
            )
        }
        EditError::Overlap {
            first,
            second,
            line,
        } => status(
            Code::InvalidArgument,
            reason::EDITS_OVERLAP,
            format!(
                "Edits {} and {} overlap at line {line} of {path}. {UNCHANGED} All edits of one call are matched \
                 against the same original text; merge them into one edit or make them touch separate text.",
                first + 1,
                second + 1
            ),
            &[("path", path.to_string()), ("line", line.to_string())],
        ),
        EditError::NotText => workspace_status(&workspace::Error::NotText {
            path: path.to_string(),
        }),
        EditError::TooManyEdits { count, max } => status(
            Code::ResourceExhausted,
            reason::LIMIT_EXCEEDED,
            format!(
                "The call carries {count} edits for {path}, more than the limit of {max} per call. {UNCHANGED} \
                 Split the edits over several calls of at most {max}, or use replace_all for a change repeated \
                 everywhere."
            ),
            &[
                ("path", path.to_string()),
                ("field", "edits".to_string()),
                ("asked", count.to_string()),
                ("max", max.to_string()),
            ],
        ),
        EditError::DuplicateOldString { first, second } => status(
            Code::InvalidArgument,
            reason::DUPLICATE_OLD_STRING,
            format!(
                "Edits {} and {} of the call for {path} have the same old_string; both would change the same \
                 text. {UNCHANGED} Send that old_string once (with replace_all to change every occurrence), or \
                 give each edit enough surrounding lines to match a different place.",
                first + 1,
                second + 1
            ),
            &[
                ("path", path.to_string()),
                ("edit_index", second.to_string()),
                ("first_index", first.to_string()),
            ],
        ),
        EditError::TooManySites { which, max } => status(
            Code::ResourceExhausted,
            reason::LIMIT_EXCEEDED,
            format!(
                "old_string{which} would bring the replacements in {path} past the limit of {max} per call. \
                 {UNCHANGED} Make old_string longer so it matches fewer places, or change a file this large \
                 with a command (for example sed)."
            ),
            &[
                ("path", path.to_string()),
                ("edit_index", which.index.to_string()),
                ("field", "replacements".to_string()),
                ("max", max.to_string()),
            ],
        ),
        EditError::ResultTooLarge { size, limit } => status(
            Code::FailedPrecondition,
            reason::FILE_TOO_LARGE,
            format!(
                "The edits would make {path} {size} bytes, over the limit of {limit} bytes. {UNCHANGED} \
                 Replace less text at once, or change the file with a command instead."
            ),
            &[
                ("path", path.to_string()),
                ("size", size.to_string()),
                ("limit", limit.to_string()),
            ],
        ),
    }
}
