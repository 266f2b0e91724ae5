//! What a compromised daemon would find: privileges, seccomp, capabilities, files.

use super::*;

/// The cases of this topic.
pub fn cases(me: &std::path::Path) -> Vec<Case> {
    let me = me.to_path_buf();
    let mut cases: Vec<Case> = Vec::new();
    // What a compromised daemon would find: every shipworm process of a lab (server,
    // relay, client, the client's interface helper and hook runner) with no_new_privs,
    // a seccomp filter on every thread and an empty bounding set; no capability but the
    // helper's CAP_NET_ADMIN, and the helper without a network socket. Checked while
    // traffic has gone through and the hook has run.
    {
        let me = Impl::Shipworm(me.clone());
        cases.push(Case {
            waits: false,
            name: "confinement: no_new_privs, seccomp, capabilities of every shipworm process".to_string(),
            expect: Expect::Pass,
            run: Box::new(move || {
                use std::os::unix::fs::PermissionsExt;
                let mut lab =
                    shipworm_lab::Lab::build(&shipworm_lab::LabSpec::nats(vec![(NatKind::PortRestricted, 1)]))
                        .map_err(|e| e.to_string())?;
                let hook = lab.dir().join("hook.sh");
                std::fs::write(&hook, "#!/bin/sh\nexit 0\n").map_err(|e| e.to_string())?;
                std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).map_err(|e| e.to_string())?;
                std::fs::set_permissions(lab.dir(), std::fs::Permissions::from_mode(0o755))
                    .map_err(|e| e.to_string())?;
                lab.start_server(&me).map_err(|e| e.to_string())?;
                lab.start_relay(&me).map_err(|e| e.to_string())?;
                lab.start_client_with(0, &me, &format!("HookScript {}\n", hook.display()))
                    .map_err(|e| e.to_string())?;
                lab.wait_qualified(0, std::time::Duration::from_secs(20)).map_err(|e| e.to_string())?;
                // The lab's daemons: their command lines name its directory.
                let dir = lab.dir().display().to_string();
                let mut seen: Vec<String> = Vec::new();
                for entry in std::fs::read_dir("/proc").map_err(|e| e.to_string())?.flatten() {
                    let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
                    let proc_dir = entry.path();
                    let cmdline = std::fs::read(proc_dir.join("cmdline")).unwrap_or_default();
                    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
                    let ours = std::fs::read_link(proc_dir.join("exe")).is_ok_and(|e| e.ends_with("shipworm"));
                    if !ours || !cmdline.contains(&dir) {
                        continue;
                    }
                    let status = std::fs::read_to_string(proc_dir.join("status")).unwrap_or_default();
                    let field = |name: &str| {
                        status.lines().find_map(|l| l.strip_prefix(name)).map(|v| v.trim().to_string()).unwrap_or_default()
                    };
                    let comm = field("Name:");
                    let role = if ["shipworm-iface", "shipworm-hook", "shipworm-echo", "shipworm-conf"].contains(&comm.as_str()) {
                        comm.clone()
                    } else {
                        cmdline.split_whitespace().nth(1).unwrap_or("?").to_string()
                    };
                    let what = format!("{role} (pid {pid})");
                    if field("NoNewPrivs:") != "1" {
                        return Err(Failed::at(6, format!("step 6: {what}: NoNewPrivs {}", field("NoNewPrivs:"))));
                    }
                    if field("CapBnd:") != "0000000000000000" {
                        return Err(Failed::at(6, format!("step 6: {what}: bounding set {}", field("CapBnd:"))));
                    }
                    for task in std::fs::read_dir(proc_dir.join("task")).map_err(|e| e.to_string())?.flatten() {
                        let t = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
                        if !t.lines().any(|l| l == "Seccomp:\t2") {
                            return Err(Failed::at(6, format!("step 6: {what}: thread {:?} without a seccomp filter", task.file_name())));
                        }
                    }
                    let want_caps = if role == "shipworm-iface" { "0000000000001000" } else { "0000000000000000" };
                    for set in ["CapEff:", "CapPrm:"] {
                        if field(set) != want_caps {
                            return Err(Failed::at(6, format!("step 6: {what}: {set} {} (want {want_caps})", field(set))));
                        }
                    }
                    // Its sockets, against the namespace's tables: the helper holds none
                    // (the socketpair to the client and netlink only); a raw IPv6
                    // socket, which sends any packet, only the server's echo link (#40, 11).
                    let table = |t: &str| std::fs::read_to_string(proc_dir.join("net").join(t)).unwrap_or_default();
                    let raw6 = table("raw6");
                    let mut tables = raw6.clone();
                    for t in ["udp", "udp6", "tcp", "tcp6", "raw"] {
                        tables += &table(t);
                    }
                    for fd in std::fs::read_dir(proc_dir.join("fd")).map_err(|e| e.to_string())?.flatten() {
                        let target = std::fs::read_link(fd.path()).unwrap_or_default().display().to_string();
                        let Some(inode) = target.strip_prefix("socket:[").and_then(|t| t.strip_suffix(']')) else { continue };
                        let held = |t: &str| t.split_whitespace().any(|w| w == inode);
                        if role == "shipworm-iface" && held(&tables) {
                            return Err(Failed::at(6, format!("step 6: {what} holds a network socket ({target})")));
                        }
                        if role != "shipworm-echo" && held(&raw6) {
                            return Err(Failed::at(6, format!("step 6: {what} holds a raw IPv6 socket ({target})")));
                        }
                    }
                    seen.push(what);
                }
                seen.sort();
                for role in ["server", "relay", "client", "shipworm-iface", "shipworm-hook", "shipworm-echo", "shipworm-conf"] {
                    if !seen.iter().any(|s| s.starts_with(&format!("{role} "))) {
                        return Err(Failed::at(6, format!("step 6: no {role} process found among {seen:?}")));
                    }
                }
                // Where the kernel has Landlock, each confined process says it restricted its
                // file access (the client's log holds the helper's line too).
                // SAFETY: landlock_create_ruleset(NULL, 0, VERSION) only asks the ABI.
                let abi = unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, 0usize, 0usize, 1u32) };
                let mut files = "no Landlock in this kernel";
                if abi > 0 {
                    for (name, want) in [("server", 1), ("relay", 1), ("client0", 2)] {
                        let said = lab.log_tail(name, 200).matches("file access restricted").count();
                        if said < want {
                            return Err(Failed::at(6, format!("step 6: {name}: {said} of {want} processes restricted their file access")));
                        }
                    }
                    files = "file access restricted by Landlock";
                }
                // The helper dies: the client says so and stops (its supervisor restarts it).
                let pid_of = |role: &str| {
                    seen.iter()
                        .find(|s| s.starts_with(&format!("{role} ")))
                        .and_then(|s| s.rsplit("pid ").next()?.trim_end_matches(')').parse::<i32>().ok())
                };
                let (helper, client) = (pid_of("shipworm-iface"), pid_of("client"));
                let (Some(helper), Some(client)) = (helper, client) else { return Err(Failed::at(7, "step 7: pids")) };
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(helper), nix::sys::signal::Signal::SIGKILL)
                    .map_err(|e| e.to_string())?;
                let deadline = Instant::now() + std::time::Duration::from_secs(5);
                let stopped = loop {
                    let st = std::fs::read_to_string(format!("/proc/{client}/status")).unwrap_or_default();
                    if st.is_empty() || st.contains("State:\tZ") {
                        break Instant::now() + std::time::Duration::from_secs(5) - deadline;
                    }
                    if Instant::now() > deadline {
                        return Err(Failed::at(7, "step 7: the client runs on after its interface helper was killed"));
                    }
                    std::thread::sleep(std::time::Duration::from_millis(10));
                };
                let log = lab.log_tail("client0", 5);
                if !log.contains("interface helper") {
                    return Err(Failed::at(7, format!("step 7: the client stopped without naming the helper: {log}")));
                }
                Ok(format!(
                    "{} processes: NoNewPrivs 1, Seccomp 2 on every thread, bounding set empty, no capability but the helper's CAP_NET_ADMIN, {files}; {}; helper killed, client stopped in {} ms saying so",
                    seen.len(),
                    seen.join(", "),
                    stopped.as_millis()
                ))
            }),
        });
    }
    cases
}
