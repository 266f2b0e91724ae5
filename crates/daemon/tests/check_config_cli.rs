//! `shipworm check-config` as an operator runs it on a file with a mistake: exit status
//! 2 and one line on stderr naming the file, the line and the reason.

use std::process::Command;

/// A file of `bytes` checked as `role`: (exit status, stderr).
fn check(name: &str, bytes: &[u8], role: &str) -> (Option<i32>, String) {
    let dir = std::env::temp_dir().join(format!("shipworm-check-config-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.conf"));
    std::fs::write(&path, bytes).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_shipworm"))
        .args(["check-config", "--role", role, path.to_str().unwrap()])
        .output()
        .expect("binary runs");
    let _ = std::fs::remove_dir_all(&dir);
    let err = String::from_utf8_lossy(&o.stderr).replace(&format!("{}", path.display()), "FILE");
    (o.status.code(), err)
}

#[test]
fn each_mistake_is_named_with_its_file_and_line() {
    // (name, file, role, what stderr must say)
    let table: &[(&str, &[u8], &str, &str)] = &[
        // A misspelt directive is the error, not the setting it failed to set.
        (
            "typo-server",
            b"ServerBindAdress 192.0.2.1\n",
            "server",
            "FILE:1: unknown directive ServerBindAdress (did you mean ServerBindAddress?)",
        ),
        (
            "typo-client",
            b"# mine\nServerAdress 192.0.2.1\n",
            "miredo",
            "FILE:2: unknown directive ServerAdress (did you mean ServerAddress?)",
        ),
        (
            "typo-relay",
            b"RelayType relay\nBindPrt 3545\n",
            "miredo",
            "FILE:2: unknown directive BindPrt (did you mean BindPort?)",
        ),
        // Nothing near: the known ones are listed.
        (
            "unknown",
            b"RelayType relay\nFrobnicate yes\n",
            "miredo",
            "FILE:2: unknown directive Frobnicate (known here: ",
        ),
        // A user the host lacks: the daemon would stop at start-up.
        (
            "user",
            b"RelayType relay\nUser nosuchuser-shipworm\n",
            "miredo",
            "FILE:2: User nosuchuser-shipworm: no such user on this host",
        ),
        (
            "user-server",
            b"ServerBindAddress 192.0.2.1\nUser nosuchuser-shipworm\n",
            "server",
            "FILE:2: User nosuchuser-shipworm: no such user",
        ),
        // Bytes that are not text: their line.
        ("latin1", b"RelayType relay\n# caf\xe9\nBindPort 3545\n", "miredo", "FILE:2: byte 0xe9 is not UTF-8 text"),
        ("value", b"RelayType relay\nBindPort 70000\n", "miredo", "FILE:2: BindPort 70000"),
    ];
    for (name, bytes, role, want) in table {
        let (code, err) = check(name, bytes, role);
        assert_eq!(code, Some(2), "{name}: {err}");
        assert_eq!(err.lines().count(), 1, "{name}: one line, not {err:?}");
        assert!(err.contains(want), "{name}: {err:?} does not say {want:?}");
    }
}
