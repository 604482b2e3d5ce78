//! Red, edit, green on the user's own project, by a service the user runs:
//! what the agent made belongs to the user, the session says what it lacks
//! without root, and a project other users can reach is not lent.

use std::os::unix::fs::MetadataExt;

use super::{Served, User};

const CALC: &str = "def add(a, b):\n    return a - b\n";
const TEST: &str = "from calc import add\nassert add(2, 3) == 5, add(2, 3)\nprint('ok')\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_developer_works_on_their_own_project_without_root() {
    let user = User::new();
    let proj = user.mkdir("proj");
    user.write("proj/calc.py", CALC);
    user.write("proj/test_calc.py", TEST);
    let served = Served::start(&user).await;

    let (code, out, err) =
        served.cli(&["session", "create", "--workspace", proj.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}\n{}", served.log());
    assert!(out.contains("without root"), "the session says so: {out}");
    let id = served.open(&proj);

    let (code, out) = served.run(&id, "python3 test_calc.py");
    assert_ne!(code, 0, "red first: {out}");
    assert!(out.contains("AssertionError"), "{out}");
    let (code, out, err) = served.cli(&[
        "edit", "-s", &id, "calc.py", "--old", "a - b", "--new", "a + b",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out) = served.run(&id, "python3 test_calc.py");
    assert_eq!(code, 0, "green: {out}");
    assert!(out.contains("ok"), "{out}");

    // What the file tools and the commands made is the user's.
    let (code, out, err) = served.cli(&["create", "-s", &id, "notes.txt", "--content", "hi\n"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out) = served.run(&id, "echo x > made.txt && mkdir -p d/e && echo y > d/e/f");
    assert_eq!(code, 0, "{out}");
    for made in ["calc.py", "notes.txt", "made.txt", "d", "d/e", "d/e/f"] {
        let md = std::fs::symlink_metadata(proj.join(made)).unwrap();
        assert_eq!((md.uid(), md.gid()), (user.uid, user.gid), "{made}");
    }
    let (code, out) = served.run(&id, "id -u");
    assert_eq!(code, 0);
    assert_eq!(
        out.lines().next(),
        Some(user.uid.to_string().as_str()),
        "commands run as the user"
    );

    // A link planted by a command is never followed by the file tools.
    let (code, out) = served.run(&id, "ln -s /etc/shadow leak");
    assert_eq!(code, 0, "{out}");
    let (code, out, err) = served.cli(&["read", "-s", &id, "leak"]);
    assert_ne!(code, 0, "{out}");
    assert!(!out.contains("root:"), "{out}");
    assert!(err.contains("refused"), "{err}");

    // A set-id file a command makes is the user's, under a home nobody
    // else may enter.
    let (code, out) = served.run(&id, "cp /bin/true suid && chmod 4755 suid");
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        std::fs::metadata(proj.join("suid")).unwrap().uid(),
        user.uid
    );
    let other = std::process::Command::new("runuser")
        .args(["-u", "nobody", "--", "test", "-x"])
        .arg(proj.join("suid"))
        .status()
        .unwrap();
    assert!(!other.success(), "another user reached the set-id file");

    let (code, out, err) = served.cli(&["session", "close", "-s", &id]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(proj.join("calc.py").exists(), "the project stays");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_project_other_users_can_reach_is_not_lent_and_a_fresh_workspace_works() {
    let user = User::new();
    let proj = user.mkdir("proj");
    user.write("proj/a.txt", "a\n");
    let served = Served::start(&user).await;
    // A home open to others (the default on many systems).
    std::fs::set_permissions(
        &user.home,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let (code, out, err) =
        served.cli(&["session", "create", "--workspace", proj.to_str().unwrap()]);
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("INVALID_WORKSPACE"), "{err}");
    assert!(err.contains("other users"), "{err}");
    std::fs::set_permissions(
        &user.home,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();

    // A fresh workspace is a plain directory, without a disk quota, and
    // the session says so.
    let (code, out, err) = served.cli(&["session", "create"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("no disk quota"), "{out}");
    let id = served.open_fresh();
    let (code, out) = served.run(&id, "echo hello > f && cat f && id -u");
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("hello"), "{out}");
    assert!(out.contains(&user.uid.to_string()), "{out}");
}
