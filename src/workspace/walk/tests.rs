use super::*;

fn walk(root: &Path, start: &str, limits: &WalkLimits) -> Result<Vec<String>, WalkError> {
    let root = Root::at(root).unwrap();
    let start = root.rel(start).unwrap();
    let mut found = Vec::new();
    walk_files(&root, &start, limits, &mut |file, _, name| {
        if name != ".gitignore" {
            found.push(file.as_str().to_string());
        }
        Ok(Flow::Continue)
    })?;
    Ok(found)
}

fn refusal(result: Result<Vec<String>, WalkError>) -> (String, WalkLimit, u64) {
    match result {
        Err(WalkError::Limit { path, what, limit }) => (path.to_string(), what, limit),
        other => panic!("expected a limit refusal, got {other:?}"),
    }
}

fn write(root: &Path, rel: &str, text: &str) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn rules(n: usize) -> String {
    (0..n).map(|i| format!("*.gen{i}\n")).collect()
}

#[test]
fn an_ignore_file_over_the_byte_bound_is_refused_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), "a.rs", "");
    write(tmp.path(), "src/.gitignore", &"#".repeat(2000));
    let limits = WalkLimits {
        ignore_file_max_bytes: 1000,
        ..WalkLimits::default()
    };
    let got = refusal(walk(tmp.path(), "", &limits));
    assert_eq!(
        got,
        ("src/.gitignore".into(), WalkLimit::IgnoreFileBytes, 1000)
    );
    // Exactly at the bound it is read.
    write(tmp.path(), "src/.gitignore", &"#".repeat(1000));
    assert_eq!(walk(tmp.path(), "", &limits).unwrap(), ["a.rs"]);
}

#[test]
fn an_ignore_file_with_too_many_rules_is_refused_and_comments_do_not_count() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), "keep.rs", "");
    write(tmp.path(), "x.gen3", "");
    let limits = WalkLimits {
        ignore_file_max_rules: 10,
        ..WalkLimits::default()
    };
    let with_comments = format!("{}{}", "# note\n\n   \n".repeat(100), rules(10));
    write(tmp.path(), ".gitignore", &with_comments);
    assert_eq!(walk(tmp.path(), "", &limits).unwrap(), ["keep.rs"]);
    write(tmp.path(), ".gitignore", &rules(11));
    let got = refusal(walk(tmp.path(), "", &limits));
    assert_eq!(got, (".gitignore".into(), WalkLimit::IgnoreFileRules, 10));
}

#[test]
fn rules_past_the_walk_total_are_refused_at_the_file_that_crosses_it() {
    let tmp = tempfile::tempdir().unwrap();
    for dir in ["a", "b", "c"] {
        write(tmp.path(), &format!("{dir}/.gitignore"), &rules(4));
        write(tmp.path(), &format!("{dir}/f.rs"), "");
    }
    let limits = WalkLimits {
        ignore_walk_max_rules: 10,
        ..WalkLimits::default()
    };
    // Siblings are not in force together, but each costs its compile.
    let got = refusal(walk(tmp.path(), "", &limits));
    assert_eq!(got, ("c/.gitignore".into(), WalkLimit::IgnoreWalkRules, 10));
    // A narrower walk stays within the bound.
    assert_eq!(walk(tmp.path(), "b", &limits).unwrap(), ["b/f.rs"]);
}

#[test]
fn ignore_files_past_the_walk_count_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    for i in 0..5 {
        write(tmp.path(), &format!("d{i}/.gitignore"), "");
    }
    let limits = WalkLimits {
        ignore_walk_max_files: 4,
        ..WalkLimits::default()
    };
    let got = refusal(walk(tmp.path(), "", &limits));
    assert_eq!(got, ("d4/.gitignore".into(), WalkLimit::IgnoreWalkFiles, 4));
}

#[test]
fn ignore_files_nested_past_the_bound_are_refused_from_the_start_path_too() {
    let tmp = tempfile::tempdir().unwrap();
    let mut dir = String::new();
    for _ in 0..4 {
        write(tmp.path(), &format!("{dir}.gitignore"), "*.o\n");
        dir.push_str("n/");
    }
    write(tmp.path(), &format!("{dir}f.rs"), "");
    let limits = WalkLimits {
        ignore_max_nesting: 3,
        ..WalkLimits::default()
    };
    let want = ("n/n/n/.gitignore".to_string(), WalkLimit::IgnoreNesting, 3);
    assert_eq!(refusal(walk(tmp.path(), "", &limits)), want);
    // The rules above a start path are in force for it as well.
    assert_eq!(refusal(walk(tmp.path(), "n/n/n", &limits)), want);
}

#[test]
fn an_ignored_directory_is_not_entered_so_its_ignore_file_costs_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), ".gitignore", "vendor/\n");
    write(tmp.path(), "vendor/.gitignore", &rules(50));
    write(tmp.path(), "main.rs", "");
    let limits = WalkLimits {
        ignore_file_max_rules: 10,
        ..WalkLimits::default()
    };
    assert_eq!(walk(tmp.path(), "", &limits).unwrap(), ["main.rs"]);
}

#[test]
fn a_walk_holding_too_many_entries_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    for i in 0..6 {
        write(tmp.path(), &format!("top{i}"), "");
    }
    for i in 0..5 {
        write(tmp.path(), &format!("sub/f{i}"), "");
    }
    let limits = WalkLimits {
        max_held_entries: 10,
        ..WalkLimits::default()
    };
    // 7 entries at the top are held while `sub` (5 more) is walked.
    let got = refusal(walk(tmp.path(), "", &limits));
    assert_eq!(got, ("sub".into(), WalkLimit::HeldEntries, 10));
    assert_eq!(walk(tmp.path(), "sub", &limits).unwrap().len(), 5);
}

#[test]
fn list_keeps_the_first_names_in_order_and_says_there_are_more() {
    let tmp = tempfile::tempdir().unwrap();
    for i in (0..50).rev() {
        write(tmp.path(), &format!("f{i:02}"), "x");
    }
    let dir = open_child_dir(Root::at(tmp.path()).unwrap().fd(), ".").unwrap();
    let (entries, more) = list(&dir, 5).unwrap();
    let names: Vec<_> = entries.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["f00", "f01", "f02", "f03", "f04"]);
    assert!(more);
    assert_eq!(entries[0].size, 1);
    let (entries, more) = list(&dir, 50).unwrap();
    assert_eq!(entries.len(), 50);
    assert!(!more);
}

/// Builds `depth` nested directories `d` under `top` through fds (the
/// path is far past PATH_MAX), with a file `f` at each listed depth.
fn deep_chain(top: &Path, depth: usize, files_at: &[usize]) {
    let mut dir = open_child_dir(Root::at(top).unwrap().fd(), ".").unwrap();
    for level in 0..=depth {
        if files_at.contains(&level) {
            let flags = OFlags::WRONLY | OFlags::CREATE;
            rustix::fs::openat(&dir, "f", flags, Mode::from_raw_mode(0o644)).unwrap();
        }
        if level < depth {
            rustix::fs::mkdirat(&dir, "d", Mode::from_raw_mode(0o755)).unwrap();
            dir = open_child_dir(&dir, "d").unwrap();
        }
    }
}

#[test]
fn a_30000_deep_tree_is_walked_to_the_depth_bound_and_no_further() {
    let tmp = tempfile::tempdir().unwrap();
    let top = tmp.path().join("ws");
    std::fs::create_dir(&top).unwrap();
    deep_chain(&top, 30_000, &[0, 1, MAX_DEPTH, MAX_DEPTH + 1, 30_000]);
    let walked = top.clone();
    // A small stack: the walk's recursion is bounded by MAX_DEPTH, not
    // by the tree.
    let found = std::thread::Builder::new()
        .stack_size(1024 * 1024)
        .spawn(move || walk(&walked, "", &WalkLimits::default()))
        .unwrap()
        .join();
    // TempDir's own removal recurses per level (it would overflow the
    // stack, also while unwinding from a failed assert); this does not.
    super::super::remove::remove_tree(&top).unwrap();
    let depth_of = |p: &String| p.matches('/').count();
    let depths: Vec<usize> = found.unwrap().unwrap().iter().map(depth_of).collect();
    // Sorted depth-first: "d" before "f" at every level.
    assert_eq!(depths, [MAX_DEPTH, 1, 0]);
}
