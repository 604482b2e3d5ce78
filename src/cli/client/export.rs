//! What `session create` prints for a script: `--export`'s shell lines,
//! which `eval "$(sandboxd session create --export)"` runs, and `--quiet`'s
//! bare id. Both come from the service's reply, so both are checked
//! against the form the service gives them (`session::prepare::new_id`,
//! `SESSION_TOKEN_PREFIX` and `secret::random_hex`) and refused otherwise:
//! a fake or hostile service could put `'`, `$(...)`, backquotes or a
//! newline in them, and the shell would run them. Every value is also
//! shell-quoted, so that even a form widened later cannot run anything.

use sandboxd::pb;

/// How the service begins every session token (`SESSION_TOKEN_PREFIX` in
/// `session::registry`, which the library keeps to itself).
const SESSION_TOKEN_PREFIX: &str = "sbxs_";

/// The shell lines `--export` prints for session `s`: the id in
/// `SANDBOXD_SESSION`, the session's own token in `SANDBOXD_SESSION_TOKEN`
/// (unset when the service sent none, so that an earlier session's token
/// is not left behind).
pub fn lines(s: &pb::Session) -> Result<String, String> {
    let id = checked_id(&s.session_id)?;
    let mut lines = format!("export SANDBOXD_SESSION={}\n", quoted(id));
    if s.session_token.is_empty() {
        lines.push_str("unset SANDBOXD_SESSION_TOKEN\n");
    } else if is_session_token(&s.session_token) {
        lines.push_str(&format!(
            "export SANDBOXD_SESSION_TOKEN={}\n",
            quoted(&s.session_token)
        ));
    } else {
        return Err(format!(
            "the service sent a session token that is not one (`{}` and 64 hex digits): {} \
             characters, not printed; nothing was printed for the shell. Is this the service \
             you meant (--addr, SANDBOXD_ADDR)? The session {id} is open: close it with \
             `sandboxd session close {id}`",
            SESSION_TOKEN_PREFIX,
            s.session_token.chars().count()
        ));
    }
    Ok(lines)
}

/// The session id the service sent, if it is one (16 lowercase hex
/// digits, as the service makes them).
pub fn checked_id(id: &str) -> Result<&str, String> {
    if is_session_id(id) {
        return Ok(id);
    }
    Err(format!(
        "the service sent a session id that is not one (16 lowercase hex digits): \"{}\"; \
         nothing was printed for the shell. Is this the service you meant (--addr, \
         SANDBOXD_ADDR)?",
        sandboxd::text::one_line(sandboxd::text::cut(id, 64).0)
    ))
}

fn is_session_id(id: &str) -> bool {
    id.len() == 16 && id.bytes().all(is_lower_hex)
}

fn is_session_token(token: &str) -> bool {
    token
        .strip_prefix(SESSION_TOKEN_PREFIX)
        .is_some_and(|rest| rest.len() == 64 && rest.bytes().all(is_lower_hex))
}

fn is_lower_hex(b: u8) -> bool {
    b.is_ascii_digit() || (b'a'..=b'f').contains(&b)
}

/// `value` as one word for a POSIX shell, as Python's `shlex.quote` makes
/// it: bare when every character is one no shell treats specially (so the
/// lines scripts already read stay as they were), else in single quotes,
/// inside which nothing is special but the quote itself, written `'\''`.
fn quoted(value: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "@%+=:,./_-".contains(c);
    if !value.is_empty() && value.chars().all(safe) {
        return value.to_string();
    }
    format!("'{}'", value.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(id: &str, token: &str) -> pb::Session {
        pb::Session {
            session_id: id.into(),
            session_token: token.into(),
            ..Default::default()
        }
    }

    const ID: &str = "0123456789abcdef";

    fn token() -> String {
        format!("{}{}", SESSION_TOKEN_PREFIX, "a1".repeat(32))
    }

    #[test]
    fn export_lines_quote_the_id_and_token_the_service_makes() {
        assert_eq!(
            lines(&session(ID, &token())).unwrap(),
            format!(
                "export SANDBOXD_SESSION={ID}\nexport SANDBOXD_SESSION_TOKEN={}\n",
                token()
            )
        );
        assert_eq!(
            lines(&session(ID, "")).unwrap(),
            format!("export SANDBOXD_SESSION={ID}\nunset SANDBOXD_SESSION_TOKEN\n")
        );
    }

    #[test]
    fn ids_and_tokens_of_another_form_are_refused() {
        for id in [
            "",
            "0123456789ABCDEF",
            "0123456789abcde",
            "0123456789abcdef0",
            "x'; touch /tmp/m; '",
            "$(touch /tmp/m)",
            "`touch /tmp/m`",
            "0123456789abcdef\ntouch /tmp/m",
            "0123456789abcde\u{0}",
            "٠١٢٣٤٥٦٧٨٩abcdef",
        ] {
            let e = lines(&session(id, &token())).unwrap_err();
            assert!(e.contains("not one"), "{id:?}: {e}");
            assert!(!e.contains('\n'), "{id:?}: {e}");
        }
        let good = token();
        for t in [
            good.to_uppercase(),
            format!("{good}a"),
            good[..good.len() - 1].to_string(),
            good.replace("sbxs_", "sbxt_"),
            format!("{}'$(touch /tmp/m)'", &good[..good.len() - 16]),
            format!("{good}\nexport PATH=/tmp"),
        ] {
            let e = lines(&session(ID, &t)).unwrap_err();
            assert!(e.contains("session token that is not one"), "{t:?}: {e}");
            // The token itself is never echoed.
            assert!(!e.contains(&t[5..]), "{t:?}: {e}");
        }
    }

    #[test]
    fn quoting_holds_whatever_the_value() {
        assert_eq!(quoted("a'b"), r"'a'\''b'");
        assert_eq!(quoted("sbxs_0f"), "sbxs_0f");
        assert_eq!(quoted(""), "''");
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("marker");
        let m = marker.display();
        for hostile in [
            format!("x'; touch {m}; '"),
            format!("$(touch {m})"),
            format!("`touch {m}`"),
            format!("a\ntouch {m}\n"),
            format!("'\\''$(touch {m})"),
            format!("a;touch {m}"),
            format!("a b|touch {m}&"),
            "~root".to_string(),
            "*".to_string(),
            String::new(),
        ] {
            let script = format!("export V={}\nprintf %s \"$V\"", quoted(&hostile));
            let out = std::process::Command::new("sh")
                .args(["-c", &script])
                .output()
                .unwrap();
            assert!(!marker.exists(), "{hostile:?} ran");
            assert_eq!(String::from_utf8(out.stdout).unwrap(), hostile);
        }
    }
}
