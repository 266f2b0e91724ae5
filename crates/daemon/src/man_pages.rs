//! The manual pages in `packaging/man/` are made from the command-line definitions
//! (`cli.rs`, by `clap_mangen`): `shipworm(8)` and one page per subcommand. This test
//! fails when they differ from what the definitions make now;
//! `SHIPWORM_BLESS=1 cargo test -p shipworm --bin shipworm man_pages` rewrites them. The
//! shell completions in `packaging/completions/` (bash, zsh, fish, by `clap_complete`)
//! likewise.

use clap::CommandFactory;
use std::path::{Path, PathBuf};

/// Each page's file name and text.
fn pages() -> Vec<(String, Vec<u8>)> {
    // Without the build's line (its opt-level): the pages are the same for every build.
    let version = crate::cli::LONG_VERSION.split("\nbuild:").next().unwrap_or_default();
    let top = crate::cli::Cli::command().long_version(version);
    let render = |cmd: clap::Command, extra: &str| {
        let mut text = Vec::new();
        clap_mangen::Man::new(cmd).section("8").render(&mut text).expect("rendering to memory");
        text.extend_from_slice(extra.as_bytes());
        text
    };
    let mut pages = vec![("shipworm.8".to_string(), render(top.clone(), COMMAND_SECTIONS))];
    for sub in top.get_subcommands().filter(|s| !s.is_hide_set()) {
        // clap takes a page's name as a static string (its `string` feature is off).
        let name: &'static str = Box::leak(format!("shipworm-{}", sub.get_name()).into_boxed_str());
        let extra = match sub.get_name() {
            "client" | "relay" | "server" => DAEMON_SECTIONS,
            "status" => STATUS_SECTIONS,
            _ => COMMAND_SECTIONS,
        };
        pages.push((format!("{name}.8"), render(sub.clone().name(name), extra)));
    }
    pages
}

/// What the daemons' pages say beyond their options: signals, files, environment, exit
/// status, where to read on.
const DAEMON_SECTIONS: &str = r#".SH SIGNALS
.TP
\fBSIGHUP\fR
Read the configuration file again (see \fBshipworm.conf\fR(5), RELOADING): a file that no
longer loads is refused with its line and the daemon runs on; one that loads to the same
settings changes nothing (the client keeps its address, the relay its peers); one whose
settings changed makes a daemon started by systemd stop with status 75, which its unit
restarts at once with the new file; started otherwise, it says which directives wait for
a restart and runs on.
.TP
\fBSIGUSR1\fR
Log the counters (\fBcounters: name=value ...\fR), 0.3 s after the signal: every
worker thread has published what it counted before it.
.TP
\fBSIGTERM\fR, \fBSIGINT\fR
Stop cleanly: a relay or server announcing through BIRD withdraws first and forwards for
\fBDrainTime\fR (a second one ends that drain at once); the counters are logged.
.SH FILES
.TP
\fI/etc/miredo/miredo.conf\fR, \fI/etc/miredo/miredo-relay.conf\fR, \fI/etc/miredo/miredo-server.conf\fR
The configuration files the units read (\fBshipworm.conf\fR(5)); Miredo's, unchanged.
.TP
\fI/run/shipworm/\fR
The status sockets \fBshipworm status\fR reads (\fB\-\-control\fR).
.SH ENVIRONMENT
.TP
\fBSHIPWORM_LOG\fR
What is logged, as a tracing filter (\fBinfo\fR by default; \fBdebug\fR, \fBshipworm=debug\fR, ...).
.TP
\fBNOTIFY_SOCKET\fR, \fBWATCHDOG_USEC\fR
Set by systemd: the daemon says READY=1, its status line and WATCHDOG=1 there.
.SH "EXIT STATUS"
.TP
\fB0\fR
Stopped cleanly.
.TP
\fB1\fR
A failure at run time (a socket, a permission, the network interface).
.TP
\fB2\fR
The command line or the configuration file is wrong (the units do not restart on it).
.TP
\fB70\fR
The daemon made a system call off its seccomp allow-list (a bug to report).
.TP
\fB75\fR
A reload found changed settings: start the daemon again (systemd does, by
\fBRestartForceExitStatus=75\fR).
.SH "SEE ALSO"
\fBshipworm\fR(8), \fBshipworm.conf\fR(5), \fBshipworm\-status\fR(8), \fBshipworm\-check\-config\fR(8)
"#;

/// What `shipworm status` says beyond its options: its exit status is a monitoring
/// check's.
const STATUS_SECTIONS: &str = r#".SH "EXIT STATUS"
.TP
\fB0\fR
The daemon serves: a client holds its Teredo address, a relay or server serves.
.TP
\fB1\fR
No daemon answers (none runs, or only sockets left by daemons that were killed), or its
answer could not be read.
.TP
\fB2\fR
Bad input: several daemons run and none was named with \fB\-\-socket\fR.
.TP
\fB3\fR
The daemon answers but does not serve: a client not qualified (resolving, offline,
qualifying, probing). What it said is printed all the same.
.SH "SEE ALSO"
\fBshipworm\fR(8), \fBshipworm\-client\fR(8), \fBshipworm\-relay\fR(8), \fBshipworm\-server\fR(8)
"#;

/// What the other pages say beyond their options.
const COMMAND_SECTIONS: &str = r#".SH "EXIT STATUS"
.TP
\fB0\fR
Success.
.TP
\fB1\fR
A failure at run time.
.TP
\fB2\fR
Bad input: the command line, an address, or a configuration file.
.SH "SEE ALSO"
\fBshipworm\fR(8), \fBshipworm.conf\fR(5)
"#;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/man")
}

/// Each completion script's file name and text.
fn completions() -> Vec<(String, Vec<u8>)> {
    use clap_complete::Shell;
    [(Shell::Bash, "shipworm.bash"), (Shell::Zsh, "_shipworm"), (Shell::Fish, "shipworm.fish")]
        .into_iter()
        .map(|(shell, file)| {
            let mut text = Vec::new();
            clap_complete::generate(shell, &mut crate::cli::Cli::command(), "shipworm", &mut text);
            (file.to_string(), text)
        })
        .collect()
}

#[test]
fn man_pages_are_made_from_the_command_line_definitions() {
    let bless = std::env::var_os("SHIPWORM_BLESS").is_some();
    let mut stale = Vec::new();
    let completions_dir = dir().join("../completions");
    let files = pages().into_iter().map(|(n, t)| (dir().join(n), t));
    for (path, text) in files.chain(completions().into_iter().map(|(n, t)| (completions_dir.join(n), t))) {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if bless {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &text).unwrap();
        } else if std::fs::read(&path).ok().as_deref() != Some(&text[..]) {
            stale.push(name);
        }
    }
    assert!(
        stale.is_empty(),
        "packaging/{{man,completions}}/{{{}}} differ from the command-line definitions: SHIPWORM_BLESS=1 cargo test -p shipworm --bin shipworm man_pages",
        stale.join(",")
    );
}

/// Pages the manual may name that other packages ship.
const ELSEWHERE: &[&str] =
    &["miredo(8)", "miredo-server(8)", "miredo.conf(5)", "miredo-server.conf(5)", "systemctl(1)", "systemd.service(5)"];

/// Every `\fBname\fR(N)` a page names: (name, section).
fn references(text: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for piece in text.split("\\fB").skip(1) {
        let Some((name, rest)) = piece.split_once("\\fR(") else { continue };
        let Some((section, _)) = rest.split_once(')') else { continue };
        if section.len() == 1 && section.chars().all(|c| c.is_ascii_digit()) {
            found.push((name.replace("\\-", "-"), section.to_string()));
        }
    }
    found
}

/// The directives `shipworm.conf(5)` describes: the first word of each entry (`.TP`
/// followed by `.B Name`).
fn described_directives(text: &str) -> std::collections::BTreeSet<String> {
    let lines: Vec<&str> = text.lines().collect();
    lines
        .windows(2)
        .filter(|w| w[0].trim() == ".TP")
        .filter_map(|w| w[1].strip_prefix(".B ")?.split_whitespace().next().map(str::to_string))
        .collect()
}

#[test]
fn no_page_names_a_page_that_is_not_there() {
    let here: Vec<String> =
        std::fs::read_dir(dir()).unwrap().filter_map(|e| e.ok()?.file_name().to_str().map(str::to_string)).collect();
    for page in &here {
        let text = std::fs::read_to_string(dir().join(page)).unwrap();
        for (name, section) in references(&text) {
            let shipped = here.contains(&format!("{name}.{section}"));
            assert!(
                shipped || ELSEWHERE.contains(&format!("{name}({section})").as_str()),
                "{page} names {name}({section}), which no page is"
            );
        }
    }
}

#[test]
fn the_configuration_page_describes_every_directive_and_no_other() {
    let text = std::fs::read_to_string(dir().join("shipworm.conf.5")).expect("packaging/man/shipworm.conf.5");
    let described = described_directives(&text);
    let known: std::collections::BTreeSet<String> = crate::config::miredo::DIRECTIVES
        .iter()
        .chain(crate::config::server::DIRECTIVES)
        .map(|d| d.to_string())
        .collect();
    let missing: Vec<&String> = known.difference(&described).collect();
    let unknown: Vec<&String> = described.difference(&known).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "shipworm.conf(5) lacks {missing:?}; describes no directive {unknown:?}"
    );
}
