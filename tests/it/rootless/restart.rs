//! A service run by an ordinary user, killed outright and started again:
//! its sessions come back, over the same directories, with nothing of the
//! service's own needing root to be found or put back.

use super::{Served, User};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_of_a_killed_service_come_back_without_root() {
    let user = User::new();
    let proj = user.mkdir("proj");
    user.write("proj/a.txt", "a\n");
    let mut served = Served::start(&user).await;
    let lent = served.open(&proj);
    let fresh = served.open_fresh();
    for id in [&lent, &fresh] {
        let (code, out) = served.run(id, "echo kept > kept.txt");
        assert_eq!(code, 0, "{out}");
    }

    served.kill_and_restart().await;

    let (code, out, err) = served.cli(&["session", "list"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&lent) && out.contains(&fresh),
        "{out}\n{}",
        served.log()
    );
    for id in [&lent, &fresh] {
        let (code, out) = served.run(id, "cat kept.txt && echo more >> kept.txt");
        assert_eq!(code, 0, "{out}\n{}", served.log());
        assert!(out.contains("kept"), "{out}");
    }
    assert_eq!(
        std::fs::read_to_string(proj.join("kept.txt")).unwrap(),
        "kept\nmore\n"
    );
    for id in [&lent, &fresh] {
        let (code, out, err) = served.cli(&["session", "close", "-s", id]);
        assert_eq!(code, 0, "{out}{err}");
    }
    assert!(proj.join("a.txt").exists(), "the lent directory stays");
    // Removed right after each close answered.
    let workspaces = user.home.join(".sandboxd-state/workspaces");
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let left = loop {
        let left: Vec<_> = std::fs::read_dir(&workspaces)
            .map(|d| d.map(|e| e.unwrap().file_name()).collect())
            .unwrap_or_default();
        if left.is_empty() || std::time::Instant::now() > until {
            break left;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(left.is_empty(), "a fresh workspace was left: {left:?}");
}
