//! Unit tests of recipes: FROM parsing, keys, packing, the CA rebase and
//! hostile contexts.

use super::*;

fn froms(text: &str) -> Result<Vec<From>, Error> {
    dockerfile::read(text).map(|r| r.froms)
}

fn tar_of(files: &[(&str, &str)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (path, data) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        b.append_data(&mut h, path, data.as_bytes()).unwrap();
    }
    b.into_inner().unwrap()
}

/// Paths and contents of a packed context, in order.
fn packed_entries(context: &[u8]) -> Vec<(String, String)> {
    let mut archive = tar::Archive::new(context);
    archive
        .entries()
        .unwrap()
        .map(|e| {
            let mut e = e.unwrap();
            let path = e.path().unwrap().to_string_lossy().into_owned();
            let mut data = String::new();
            e.read_to_string(&mut data).unwrap();
            (path, data)
        })
        .collect()
}

fn dockerfile(text: &str, context: Vec<u8>) -> Source {
    Source::Dockerfile {
        text: text.into(),
        context,
    }
}

#[test]
fn froms_skip_stages_flags_comments_and_follow_continuations() {
    let text = "# escape=\\\n# a comment\nFROM --platform=linux/amd64 \\\n  base:1 AS build\nRUN x\nfrom build\nFROM scratch\nFROM other\n";
    let f: Vec<(usize, usize, Option<String>, String)> = froms(text)
        .unwrap()
        .into_iter()
        .map(|f| (f.first_line, f.last_line, f.image, f.words.join(" ")))
        .collect();
    assert_eq!(
        f,
        vec![
            (
                2,
                3,
                Some("base:1".into()),
                "FROM --platform=linux/amd64 base:1 AS build".into()
            ),
            (5, 5, None, "from build".into()),
            (6, 6, None, "FROM scratch".into()),
            (7, 7, Some("other".into()), "FROM other".into()),
        ]
    );
    assert!(matches!(
        froms("FROM $BASE\n"),
        Err(Error::InvalidRecipe(_))
    ));
    assert!(matches!(froms("FROM a;rm\n"), Err(Error::InvalidRecipe(_))));
}

#[test]
fn froms_are_read_as_the_engine_reads_them() {
    let images = |text: &str| -> Vec<Option<String>> {
        froms(text).unwrap().into_iter().map(|f| f.image).collect()
    };
    // A directive after an ordinary comment is no directive.
    assert_eq!(
        images("# hello\n# escape=`\nARG A=1`\nFROM hidden:5\nFROM b\n"),
        vec![Some("hidden:5".to_string()), Some("b".to_string())]
    );
    // Comments and blank lines inside a continuation are skipped, so
    // the next line continues the instruction.
    assert_eq!(
        images("FROM a\nRUN echo \\\n# c\n\nFROM b\n"),
        vec![Some("a".to_string())]
    );
    let f = froms("FROM a \\\n# c\n  AS x\nFROM x\n").unwrap();
    assert_eq!(f[0].words.join(" "), "FROM a AS x");
    assert_eq!(f[1].image, None);
    // A byte-order mark is dropped, as the engine drops it.
    let bom = Recipe::new(
        dockerfile("\u{feff}FROM a\n", Vec::new()),
        "d",
        None,
        1 << 20,
    );
    assert_eq!(bom.unwrap().bases, vec!["a".to_string()]);
}

#[test]
fn every_from_is_written_as_the_engine_will_print_it() {
    let r = Recipe::new(
        dockerfile("FROM   a  \\\n AS one\nRUN x\nFROM one\n", Vec::new()),
        "d",
        None,
        1 << 20,
    )
    .unwrap();
    let packed = r.pack(&BTreeMap::new()).unwrap();
    assert_eq!(packed.froms, vec!["FROM a AS one", "FROM one"]);
    let df = packed_entries(&packed.context)
        .into_iter()
        .find(|e| e.0 == DOCKERFILE)
        .unwrap()
        .1;
    assert_eq!(df, "FROM a AS one\nRUN x\nFROM one\n");
}

#[test]
fn the_key_follows_content_not_archive_order() {
    let a = Recipe::new(
        dockerfile("FROM b\nCOPY . /x\n", tar_of(&[("a", "1"), ("b", "2")])),
        "d",
        None,
        1 << 20,
    )
    .unwrap();
    let b = Recipe::new(
        dockerfile("FROM b\nCOPY . /x\n", tar_of(&[("b", "2"), ("a", "1")])),
        "d",
        None,
        1 << 20,
    )
    .unwrap();
    let c = Recipe::new(
        dockerfile("FROM b\nCOPY . /x\n", tar_of(&[("a", "1"), ("b", "3")])),
        "d",
        None,
        1 << 20,
    )
    .unwrap();
    let ids = ["sha256:1".to_string()];
    assert_eq!(a.key(&ids, &[]), b.key(&ids, &[]));
    assert_ne!(a.key(&ids, &[]), c.key(&ids, &[]));
    assert_ne!(a.key(&ids, &[]), a.key(&["sha256:2".to_string()], &[]));
    assert_eq!(a.bases, vec!["b".to_string()]);
}

#[test]
fn a_setup_script_is_a_dockerfile_on_the_default_base() {
    let r = Recipe::new(
        Source::Setup {
            script: "apt-get install -y x\n".into(),
            base: None,
        },
        "sandboxd-default:latest",
        None,
        1 << 20,
    )
    .unwrap();
    assert_eq!(r.bases, vec!["sandboxd-default:latest".to_string()]);
    let packed = r.pack(&BTreeMap::new()).unwrap();
    let entries = packed_entries(&packed.context);
    let names: Vec<&str> = entries.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(names, vec!["setup.sh", DOCKERIGNORE, DOCKERFILE]);
    let df = &entries[2].1;
    assert!(df.starts_with("FROM sandboxd-default:latest\nCOPY setup.sh "));
    assert!(packed.injected.is_empty() && packed.hidden_steps == 0);
}

#[test]
fn sandboxds_dockerfile_is_never_copied_by_copy_dot() {
    let mine = Recipe::new(
        dockerfile("FROM a\nCOPY . /x\n", tar_of(&[(".dockerignore", "*.env")])),
        "d",
        None,
        1 << 20,
    )
    .unwrap();
    let entries = packed_entries(&mine.pack(&BTreeMap::new()).unwrap().context);
    assert_eq!(
        entries[0],
        (".dockerignore".into(), format!("*.env\n{DOCKERFILE}\n"))
    );
    let none = Recipe::new(dockerfile("FROM a\n", Vec::new()), "d", None, 1 << 20).unwrap();
    let entries = packed_entries(&none.pack(&BTreeMap::new()).unwrap().context);
    assert_eq!(
        entries[0],
        (
            ".dockerignore".into(),
            format!(".dockerignore\n{DOCKERFILE}\n")
        )
    );
}

#[test]
fn with_a_ca_every_base_is_rebased_and_every_stage_names_it() {
    let text = "FROM a AS one\nRUN x\nFROM --platform=p \\\n  b\nRUN y\nFROM one\n";
    let plain = Recipe::new(dockerfile(text, Vec::new()), "d", None, 1 << 20).unwrap();
    let with = Recipe::new(dockerfile(text, Vec::new()), "d", Some(b"CA"), 1 << 20).unwrap();
    assert_ne!(plain.key(&[], &[]), with.key(&[], &[]));
    let rebased = BTreeMap::from([
        ("a".to_string(), "layer-a".to_string()),
        ("b".to_string(), "layer-b".to_string()),
    ]);
    let packed = with.pack(&rebased).unwrap();
    let df = packed_entries(&packed.context)
        .into_iter()
        .find(|e| e.0 == DOCKERFILE)
        .unwrap()
        .1;
    let args: String = CA_VARIABLES
        .iter()
        .map(|v| format!("ARG {v}={CA_PATH}\n"))
        .collect();
    assert_eq!(
        df,
        format!(
            "FROM layer-a AS one\n{args}RUN x\nFROM --platform=p layer-b\n{args}RUN y\nFROM one\n{args}"
        )
    );
    assert_eq!(packed.injected.len(), CA_VARIABLES.len());
    assert_eq!(packed.hidden_steps, 3 * CA_VARIABLES.len() as u32);
    assert_eq!(
        packed
            .shown_as
            .get("FROM --platform=p layer-b")
            .map(String::as_str),
        Some("FROM --platform=p b")
    );
    // The bundle is not in the caller's context: it is in the layers.
    assert!(!packed_entries(&packed.context).iter().any(|e| e.1 == "CA"));
    let layer = packed_entries(&ca_layer("a", b"CA").unwrap());
    assert_eq!(layer[0].1, format!("FROM a\nCOPY build-ca.pem {CA_PATH}\n"));
    assert_eq!(layer[1], ("build-ca.pem".into(), "CA".into()));
    assert_ne!(
        ca_layer_key("sha256:1", b"CA"),
        ca_layer_key("sha256:2", b"CA")
    );
    assert_ne!(
        ca_layer_key("sha256:1", b"CA"),
        ca_layer_key("sha256:1", b"CB")
    );
}

#[test]
fn bad_contexts_are_refused_naming_the_entry() {
    let big = Recipe::new(dockerfile("FROM a\n", vec![0; 2048]), "d", None, 1024);
    assert!(matches!(big, Err(Error::ContextTooLarge { .. })));
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Fifo);
    h.set_size(0);
    b.append_data(&mut h, "pipe", std::io::empty()).unwrap();
    let fifo = Recipe::new(
        dockerfile("FROM a\n", b.into_inner().unwrap()),
        "d",
        None,
        1 << 20,
    );
    assert!(fifo.unwrap_err().to_string().contains("pipe"));
    let reserved = Recipe::new(
        dockerfile("FROM a\n", tar_of(&[(DOCKERFILE, "x")])),
        "d",
        None,
        1 << 20,
    );
    assert!(matches!(reserved, Err(Error::InvalidContext(_))));
    let mut b = tar::Builder::new(Vec::new());
    let long = format!("a{}", "é".repeat(2100));
    let mut h = tar::Header::new_gnu();
    h.set_size(0);
    h.set_entry_type(tar::EntryType::Regular);
    b.append_data(&mut h, &long, std::io::empty()).unwrap();
    let long = Recipe::new(
        dockerfile("FROM a\n", b.into_inner().unwrap()),
        "d",
        None,
        1 << 20,
    );
    assert!(long.unwrap_err().to_string().contains("too long"));
    let none = Recipe::new(dockerfile("RUN x\n", Vec::new()), "d", None, 1 << 20);
    assert!(matches!(none, Err(Error::InvalidRecipe(_))));
    let garbage = Recipe::new(dockerfile("FROM a\n", vec![7; 1024]), "d", None, 1 << 20);
    assert!(matches!(garbage, Err(Error::InvalidContext(_))));
}
