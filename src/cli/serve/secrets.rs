//! The tokens the operator gives `serve` (`--token-file`, `SANDBOXD_TOKEN`,
//! `--approver-token-file`, `--build-token-file`): read, trimmed, and
//! refused when too short to be secret. Any local user may try tokens
//! against a loopback port as fast as it answers, so a token must be out of
//! reach of guessing: [`MIN_CHARS`] characters at least (the tokens the
//! service makes itself are 64 hex digits).

use std::path::Path;

use crate::cli::AnyError;

/// The shortest token `serve` accepts.
pub const MIN_CHARS: usize = 16;

/// `token`, the `what` token, if it is long enough to be secret.
pub fn checked(token: String, what: &str) -> Result<String, AnyError> {
    let n = token.chars().count();
    if n == 0 {
        return Err(format!("the {what} is empty").into());
    }
    if n < MIN_CHARS {
        return Err(format!(
            "the {what} has {n} characters; a token must have at least {MIN_CHARS} to be out of \
             reach of guessing (make one with `openssl rand -hex 32`)"
        )
        .into());
    }
    Ok(token)
}

/// The `what` token in `file` (trimmed), checked as [`checked`] does.
pub fn read(file: &Path, what: &str) -> Result<String, AnyError> {
    let token = std::fs::read_to_string(file)
        .map_err(|e| format!("cannot read the {what} file {}: {e}", file.display()))?
        .trim()
        .to_string();
    checked(token, what)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_too_short_to_be_secret_are_refused() {
        for short in ["", "x", "123456789012345"] {
            let refused = checked(short.into(), "token").unwrap_err().to_string();
            assert!(refused.contains("token"), "{refused}");
        }
        assert_eq!(
            checked("1234567890123456".into(), "token").unwrap(),
            "1234567890123456"
        );
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("t");
        std::fs::write(&file, "  the-operators-token \n").unwrap();
        assert_eq!(read(&file, "token").unwrap(), "the-operators-token");
        std::fs::write(&file, "a\n").unwrap();
        let refused = read(&file, "approver token").unwrap_err().to_string();
        assert!(
            refused.contains("approver token has 1 characters"),
            "{refused}"
        );
    }
}
