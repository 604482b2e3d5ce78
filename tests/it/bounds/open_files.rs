//! A session's processes get a fixed open-files limit (soft and hard), so
//! a session at its limits holds a stated share of the host's file table,
//! and a session holding all it can leaves another able to open files.

use crate::common::{TestServer, run};
use sandboxd::sandbox::file_table::NOFILE;

/// Python that opens `/dev/null` until refused and prints how many it got.
const HOLD: &str = "python3 -c '
import os
n = 0
try:
    while True:
        os.open(\"/dev/null\", os.O_RDONLY); n += 1
except OSError as e:
    print(n, e.errno)
'";

#[tokio::test]
async fn a_command_cannot_open_past_the_limit_nor_raise_it() {
    let srv = TestServer::with_docker().await;
    let (sid, _) = srv.session().await;
    let ran = run(&srv.client, &sid, "ulimit -Sn; ulimit -Hn", 30_000).await;
    assert_eq!(ran.stdout(), format!("{NOFILE}\n{NOFILE}\n"), "{ran:?}");
    let ran = run(&srv.client, &sid, "ulimit -n 4096 && echo raised", 30_000).await;
    assert!(!ran.stdout().contains("raised"), "{ran:?}");
    let ran = run(&srv.client, &sid, HOLD, 30_000).await;
    let (count, errno) = ran.stdout().trim().split_once(' ').unwrap();
    let count: u64 = count.parse().unwrap();
    assert!(count < NOFILE && count > NOFILE - 16, "{ran:?}");
    assert_eq!(errno, "24", "EMFILE: {ran:?}");
    // A long-running process gets the same.
    let ran = run(
        &srv.client,
        &sid,
        "prlimit --pid $$ --nofile=100000: ; ulimit -n",
        30_000,
    )
    .await;
    assert!(ran.stdout().ends_with(&format!("{NOFILE}\n")), "{ran:?}");
    srv.stop().await;
}

#[tokio::test]
async fn a_session_holding_all_it_can_leaves_another_able_to_open_files() {
    let srv = TestServer::with_docker().await;
    let (hog, _) = srv.session().await;
    let (other, _) = srv.session().await;
    // The hog: background holders, each at its limit, left running.
    let holders = "for i in 1 2 3 4 5 6 7 8; do python3 -c '
import os, time
fd = 0
try:
    while True: fd = os.open(\"/dev/null\", os.O_RDONLY)
except OSError:
    os.close(fd)
    open(\"/tmp/held\", \"a\").write(\"x\")
time.sleep(600)
' >/dev/null 2>&1 & done; for t in $(seq 100); do [ \"$(wc -c </tmp/held 2>/dev/null)\" = 8 ] && break; sleep 0.1; done; wc -c </tmp/held";
    let ran = run(&srv.client, &hog, holders, 60_000).await;
    assert_eq!(ran.stdout().trim(), "8", "{ran:?}");
    let ran = run(&srv.client, &other, HOLD, 30_000).await;
    let count: u64 = ran.stdout().split(' ').next().unwrap().parse().unwrap();
    assert!(count > NOFILE - 16, "{ran:?}");
    srv.stop().await;
}
