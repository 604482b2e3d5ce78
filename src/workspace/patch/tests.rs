use super::*;

const CALC: &str = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n";

#[test]
fn a_git_patch_of_several_files_parses_with_modes_renames_and_quoted_paths() {
    let text = "commit message\n\ndiff --git a/calc.py b/calc.py\nindex 1..2 100644\n--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\ndiff --git a/new.txt b/new.txt\nnew file mode 100755\n--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1 @@\n+hi\n\\ No newline at end of file\ndiff --git a/old b/\"caf\\303\\251\"\nsimilarity index 100%\nrename from old\nrename to \"caf\\303\\251\"\ndiff --git a/gone.txt b/gone.txt\ndeleted file mode 100644\n--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n";
    let files = parse(text).unwrap();
    let summary: Vec<(Action, &str, Option<u32>)> = files
        .iter()
        .map(|f| (f.action.clone(), f.path(), f.new_mode))
        .collect();
    assert_eq!(
        summary,
        vec![
            (Action::Modify, "calc.py", None),
            (Action::Create, "new.txt", Some(0o755)),
            (Action::Rename, "café", None),
            (Action::Delete, "gone.txt", None),
        ]
    );
    assert_eq!(apply(b"", &files[1].hunks).unwrap().bytes, b"hi");
}

#[test]
fn a_hunk_applies_where_it_says_or_at_its_one_place_elsewhere() {
    let patch = "--- a/c\n+++ b/c\n@@ -5,2 +5,2 @@\n def sub(a, b):\n-    return a - b\n+    return a - b  # sub\n";
    let hunks = &parse(patch).unwrap()[0].hunks;
    let out = apply(CALC.as_bytes(), hunks).unwrap();
    assert!(
        String::from_utf8(out.bytes)
            .unwrap()
            .ends_with("return a - b  # sub\n")
    );
    // The file grew above the hunk: found at its one place further down.
    let grown = format!("import os\nimport sys\n{CALC}");
    let out = apply(grown.as_bytes(), hunks).unwrap();
    assert!(
        String::from_utf8(out.bytes)
            .unwrap()
            .ends_with("return a - b  # sub\n")
    );
}

#[test]
fn a_hunk_found_nowhere_or_twice_is_refused_with_what_is_there() {
    let twice = "--- a/c\n+++ b/c\n@@ -9,1 +9,1 @@\n-    return a - b\n+    return 0\n";
    let err = apply(CALC.as_bytes(), &parse(twice).unwrap()[0].hunks).unwrap_err();
    assert_eq!(err.why, Mismatch::Ambiguous { at: vec![2, 6] });
    let stale = "--- a/c\n+++ b/c\n@@ -1,2 +1,2 @@\n def add(x, y):\n-    return x - y\n+    return x + y\n";
    let err = apply(CALC.as_bytes(), &parse(stale).unwrap()[0].hunks).unwrap_err();
    assert_eq!(err.hunk, 1);
    assert_eq!(
        err.why,
        Mismatch::NotFound {
            at: 1,
            found: vec!["def add(a, b):".into(), "    return a - b".into()],
            past_end: false
        }
    );
    // No fuzz: a whitespace difference is a mismatch.
    let spaced =
        "--- a/c\n+++ b/c\n@@ -1,2 +1,2 @@\n def add(a, b):\n-   return a - b\n+    return a + b\n";
    assert!(apply(CALC.as_bytes(), &parse(spaced).unwrap()[0].hunks).is_err());
}

#[test]
fn malformed_and_binary_patches_are_refused() {
    let cases = [
        "",
        "just words\n",
        "--- a/x\nno plus line\n",
        "--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\n",
        "--- a/x\n+++ b/x\n@@ bogus @@\n",
        "--- a/x\n+++ b/x\n",
        "--- a/x\n+++ b/x\n@@ -3,1 +3,1 @@\n-a\n+b\n@@ -1,1 +1,1 @@\n-c\n+d\n",
        "--- /dev/null\n+++ /dev/null\n@@ -0,0 +1 @@\n+a\n",
        "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n",
    ];
    for text in cases {
        assert!(
            matches!(parse(text), Err(ParseError::Malformed { .. })),
            "{text:?}: {:?}",
            parse(text)
        );
    }
    let binary = "diff --git a/img.png b/img.png\nindex 1..2 100644\nGIT binary patch\nliteral 5\n";
    assert!(matches!(
        parse(binary),
        Err(ParseError::Unsupported {
            what: "a binary patch",
            ..
        })
    ));
    let marked = "diff --git a/img.png b/img.png\nBinary files a/img.png and b/img.png differ\n";
    assert!(matches!(parse(marked), Err(ParseError::Unsupported { .. })));
}

#[test]
fn a_hunk_is_looked_for_nearby_only() {
    // The hunk's lines occur once, 5,000 lines below where it says.
    let mut text = String::new();
    for i in 0..5000 {
        text.push_str(&format!("filler {i}\n"));
    }
    text.push_str("unique a\nunique b\n");
    let patch = "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n unique a\n-unique b\n+unique c\n";
    let hunks = &parse(patch).unwrap()[0].hunks;
    let err = apply(text.as_bytes(), hunks).unwrap_err();
    assert!(
        matches!(err.why, Mismatch::NotFound { at: 1, .. }),
        "{err:?}"
    );
    // Within the bound it is found.
    let near = patch.replace(
        "@@ -1,2 +1,2 @@",
        &format!("@@ -{},2 +{},2 @@", 5001 - NEARBY + 1, 5001 - NEARBY + 1),
    );
    let out = apply(text.as_bytes(), &parse(&near).unwrap()[0].hunks).unwrap();
    assert!(
        String::from_utf8(out.bytes)
            .unwrap()
            .ends_with("unique a\nunique c\n")
    );
}

/// A patch of `hunks` hunks over blocks of 19 `a` lines and a `b{i}` line,
/// hunk `i` removing `b{i}` with its 19 lines of context and saying it sits
/// `off` lines later than it does (after what the hunk before taught).
fn far_hunks(hunks: usize, off: i64) -> (Vec<u8>, String) {
    let mut file = String::new();
    let mut patch = String::from("--- a/f\n+++ b/f\n");
    let mut shift: i64 = 0;
    for i in 0..hunks {
        for _ in 0..19 {
            file.push_str("a\n");
        }
        file.push_str(&format!("b{i}\n"));
        // Where hunk i is, 0-based, once earlier hunks removed a line each.
        let at = (20 * i) as i64;
        let old_start = at + off - shift + 1;
        shift = at - (old_start - 1);
        patch.push_str(&format!("@@ -{old_start},20 +{},19 @@\n", old_start));
        for _ in 0..19 {
            patch.push_str(" a\n");
        }
        patch.push_str(&format!("-b{i}\n"));
    }
    // Room after the last hunk for the search.
    for _ in 0..2000 {
        file.push_str("z\n");
    }
    (file.into_bytes(), patch)
}

#[test]
fn twelve_thousand_hunks_far_from_where_they_say_pass_the_search_budget_quickly() {
    let (file, patch) = far_hunks(12_000, NEARBY as i64);
    let files = parse(&patch).unwrap();
    let t = std::time::Instant::now();
    let err = apply(&file, &files[0].hunks).unwrap_err();
    let took = t.elapsed();
    eprintln!("12,000 far hunks: refused at hunk {} in {took:?}", err.hunk);
    assert_eq!(
        err.why,
        Mismatch::SearchBudget {
            limit: SEARCH_BUDGET
        }
    );
    assert!(err.hunk > 1 && err.hunk < 12_000, "{err:?}");
    // Generous: the whole search took 26 s of CPU; the budget is a
    // fraction of a second in a release build.
    assert!(took < std::time::Duration::from_secs(20), "{took:?}");
}

#[test]
fn the_search_budget_is_one_for_the_whole_patch_across_its_files() {
    // Each file alone fits the budget; the two together do not.
    let (file, one) = far_hunks(700, NEARBY as i64);
    let files = parse(&one).unwrap();
    apply(&file, &files[0].hunks).expect("one file fits the budget");
    let two = format!("{one}{}", one.replace("a/f", "a/g").replace("b/f", "b/g"));
    let files = parse(&two).unwrap();
    apply(&file, &files[0].hunks).expect("the first file fits");
    let err = apply(&file, &files[1].hunks).unwrap_err();
    assert!(matches!(err.why, Mismatch::SearchBudget { .. }), "{err:?}");
}

#[test]
fn ordinary_hunks_that_moved_still_apply() {
    // 200 hunks over a file of unique lines, each named up to 900 lines
    // from where it is.
    let file: String = (0..201_000).map(|n| format!("line {n}\n")).collect();
    let mut patch = String::from("--- a/f\n+++ b/f\n");
    for i in 0..200i64 {
        let at = 30 + 1000 * i;
        // Each hunk off from the truth by its own amount, so that what the
        // hunk before taught is wrong by up to 900 lines either way.
        let old_start = at + (i * 337) % 900 + 1;
        patch.push_str(&format!(
            "@@ -{old_start},3 +{old_start},3 @@\n line {}\n-line {}\n+changed {}\n line {}\n",
            at,
            at + 1,
            at + 1,
            at + 2
        ));
    }
    let files = parse(&patch).unwrap();
    let out = apply(file.as_bytes(), &files[0].hunks).unwrap();
    let text = String::from_utf8(out.bytes).unwrap();
    assert_eq!(text.matches("changed ").count(), 200);
    assert!(text.contains("line 30\nchanged 31\nline 32\n"));
}
