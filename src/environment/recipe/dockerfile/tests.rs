//! Unit tests of the Dockerfile reader: directives, continuations, flags,
//! remote sources in every form, images named by `--from`, triggers.

use super::*;

fn refused(text: &str) -> String {
    match read(text) {
        Err(Error::InvalidRecipe(why)) => why,
        other => panic!("{text:?} was not refused: {other:?}"),
    }
}

#[test]
fn directives_are_read_as_the_engine_reads_them() {
    let joined = |text: &str| -> Vec<String> {
        instructions(text)
            .unwrap()
            .0
            .into_iter()
            .map(|i| i.text)
            .collect()
    };
    // Case-insensitive keys, spaces around `=`, not only the first line.
    assert_eq!(
        joined("#ESCAPE = `\nFROM a\nRUN x `\n y\n"),
        vec!["FROM a", "RUN x  y"]
    );
    // An unknown directive, a comment or a blank line ends them.
    for head in ["# foo=bar\n", "# hello\n", "\n", "FROM a\n"] {
        let text = format!("{head}# escape=`\nRUN x `\nRUN y\n");
        let got = joined(&text);
        assert_eq!(got.last().unwrap(), "RUN y", "{text:?}: {got:?}");
    }
    // Refused: a repeated directive, an escape of neither kind, syntax.
    for bad in [
        "# escape=`\n# escape=`\nFROM a\n",
        "# escape=`x\nFROM a\n",
        "# escape= \nFROM a\n",
        "# syntax=docker/dockerfile:1\nFROM a\n",
        "# escape=`\n#Syntax=x\nFROM a\n",
    ] {
        assert!(instructions(bad).is_err(), "{bad:?}");
    }
    // No value at all: a comment, as for the engine.
    assert_eq!(joined("# escape=\nRUN x \\\n y\n"), vec!["RUN x  y"]);
}

#[test]
fn continuations_join_lines_with_nothing_between() {
    let (ins, _) =
        instructions("FROM a\\\n:1 AS b\r\nRUN x \\  \t\n  # c\n\n  y\nRUN z\\").unwrap();
    let got: Vec<(usize, usize, &str)> = ins
        .iter()
        .map(|i| (i.first_line, i.last_line, i.text.as_str()))
        .collect();
    assert_eq!(
        got,
        vec![
            (0, 1, "FROM a:1 AS b"),
            (2, 5, "RUN x   y"),
            (6, 6, "RUN z")
        ]
    );
    let f = read("FROM sandboxd-default\\\n:latest\n").unwrap();
    assert_eq!(f.froms[0].image.as_deref(), Some("sandboxd-default:latest"));
}

#[test]
fn flags_are_unquoted_as_the_engine_unquotes_them() {
    let s = split_line("COPY --from=\"im\"g --chown=a\\ b -- x y", 1).unwrap();
    assert_eq!(s.command, "copy");
    assert_eq!(s.flags, vec!["--from=img", "--chown=a b"]);
    assert_eq!(s.args, "x y");
    let s = split_line("add\t  --chown=1 [\"a\", \"b\"]", 1).unwrap();
    assert_eq!(
        (s.command.as_str(), s.args.as_str()),
        ("add", "[\"a\", \"b\"]")
    );
}

/// Every spelling of a remote source, in every form of the instruction.
#[test]
fn remote_sources_are_refused_however_they_are_written() {
    let hosts = [
        "http://127.0.0.1:9/s",
        "http://localhost/s",
        "http://vm/s",
        "http://127.1/s",
        "http://127.0.0.2/s",
        "http://0x7f000001/s",
        "http://2130706433/s",
        "http://0177.0.0.1/s",
        "http://[::1]/s",
        "http://[::ffff:127.0.0.1]/s",
        "http://172.17.0.1/s",
        "http://192.0.2.2/s",
        "https://deb.debian.org/x",
        "HTTP://127.0.0.1/s",
        "ftp://127.0.0.1/s",
        "git://127.0.0.1/r.git",
        "git@127.0.0.1:r.git",
    ];
    for url in hosts {
        for form in [
            format!("ADD {url} /s"),
            format!("add --chown=1:1 {url} /s"),
            format!("ADD --checksum=sha256:00 {url} /s"),
            format!("ADD [\"{url}\", \"/s\"]"),
            format!("ADD local {url} /s"),
            format!("ADD \\\n  {url} \\\n  /s"),
            format!("COPY {url} /s"),
            format!("ONBUILD ADD {url} /s"),
            format!("ADD \"{url}\" /s"),
        ] {
            let text = format!("FROM a AS one\nRUN true\nFROM one\n{form}\n");
            let why = refused(&text);
            assert!(why.starts_with("line 4"), "{text:?}: {why}");
        }
        let later_stage = format!("FROM a\nFROM b AS two\nADD {url} /s\n");
        refused(&later_stage);
        let backtick = format!("# escape=`\nFROM a\nADD `\n {url} /s\n");
        refused(&backtick);
    }
    // Sources whose final form the engine decides: refused.
    for src in [
        "${URL}",
        "$URL",
        "h\\ttp://x/s",
        "'http'://x",
        "\"x\"",
        "ht`tp",
        "github.com/a/b",
        "u@h:repo",
    ] {
        refused(&format!(
            "FROM a\nARG URL=http://127.0.0.1/\nADD {src} /s\n"
        ));
    }
    refused("FROM a\nADD [\"$URL\", \"/s\"]\n");
    // COPY never fetches (the engine refuses a URL there, expanded or
    // not): its variables are left to the engine.
    read("FROM a\nARG APP=x\nCOPY ${APP}/ \"/app\" /opt/\n").unwrap();
    refused("FROM a\nADD [\"h\\u0074tp://127.0.0.1/\", \"/s\"]\n");
    refused("FROM a\nADD [1, \"/s\"]\n");
    // What follows the array (which the engine ignores) is refused.
    refused("FROM a\nADD [\"http:\\u002f\\u002f127.0.0.1/\", \"/s\"] junk\n");
    refused("FROM a\nADD [\"local\", \"/s\"] http://127.0.0.1/\n");
    refused("FROM a\nCOPY [\"local\", \"/s\"] x\n");
    read("FROM a\nCOPY [\"local\", \"/s\"]  \n").unwrap();
    // Local sources, and a destination with a variable, are fine.
    let ok = read(
        "FROM a\nARG D=/opt\nADD app.tar.gz $D/\nCOPY --chown=1:1 [\"a b\", \"/x/\"]\n\
         ADD http /s\nCOPY . .\n",
    )
    .unwrap();
    assert!(ok.images.is_empty());
}

#[test]
fn a_bases_triggers_get_the_same_checks() {
    check_trigger("b", "RUN make").unwrap();
    check_trigger("b", "COPY . /app").unwrap();
    for bad in [
        "ADD http://127.0.0.1:9/s /s",
        "add [\"http://[::1]/s\", \"/s\"]",
        "COPY --from=other /x /x",
        "RUN --network=host true",
        "ADD $U /s",
    ] {
        match check_trigger("b", bad) {
            Err(Error::InvalidRecipe(why)) => {
                assert!(
                    why.starts_with("base image b has the ONBUILD trigger"),
                    "{why}"
                );
                assert!(!why.contains("line 0"), "{why}");
            }
            other => panic!("{bad}: {other:?}"),
        }
    }
}

#[test]
fn images_named_by_from_flags_are_listed_and_stages_are_not() {
    let r = read(
        "FROM a AS Build\nFROM b\nCOPY --from=build /x /x\nCOPY --from=0 /x /y\n\
         COPY --from=other:2 /x /z\nCOPY --from=other:2 /x /w\n\
         RUN --mount=type=bind,from=tools,target=/t true\nFROM c AS late\n",
    )
    .unwrap();
    assert_eq!(r.images, vec!["other:2".to_string(), "tools".to_string()]);
    // The engine takes quotes out of flags before it reads them.
    let r = read("FROM a\nRUN --mount=\"from=b\" true\n").unwrap();
    assert_eq!(r.images, vec!["b".to_string()]);
    // A stage defined later is not a stage yet: an image by that name.
    let r = read("FROM a\nCOPY --from=late /x /x\nFROM b AS late\n").unwrap();
    assert_eq!(r.images, vec!["late".to_string()]);
    for bad in [
        "FROM a\nCOPY --from=$IMG /x /x\n",
        "FROM a\nCOPY --from=a;b /x /x\n",
        "FROM a\nADD --from=b /x /x\n",
        "FROM a\nONBUILD COPY --from=b /x /x\n",
        "FROM a\nRUN --network=host true\n",
        "FROM a\nRUN --security=insecure true\n",
        "FROM a\nRUN --mount=from=\\\"b true\n",
        "FROM a\nRUN --mount=type=cache,from=$X true\n",
        "FROM a\nONBUILD ONBUILD RUN true\n",
        "FROM a\nCOPY --from=é /x /x\n",
    ] {
        refused(bad);
    }
}
