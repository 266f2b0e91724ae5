//! `shipworm`: the Teredo client, server, relay and host-specific relay, and the tools
//! around them. This crate is the top floor, laid out by what each part is: `cmd/` (a
//! file per subcommand), `io/` (UDP batches, TUN, rtnetlink: the library half of the
//! crate), `runtime/` (what every daemon shares: the shell every role runs in — set-up
//! in the safe order, the per-tick chores — with its counters table, logging,
//! privileges, confinement, signals, pid file, status socket, metrics, name resolution)
//! and `config/` (Miredo's file formats).
//! This file only parses the command line and dispatches. The protocol itself lives in
//! `shipworm-proto`, the packet formats in `shipworm-wire`.

use shipworm::io;

mod cli;
mod cmd;
mod config;
#[cfg(test)]
mod man_pages;
mod runtime;

use clap::Parser;
use std::process::ExitCode;

/// Clap's error as one line: its first line plus the indented lines that continue it
/// (the names of missing arguments), without the usage block.
fn one_line(text: &str) -> String {
    let mut lines = text.lines();
    let first = lines.next().unwrap_or("invalid arguments");
    let mut out = first.strip_prefix("error: ").unwrap_or(first).trim_end_matches(':').to_string();
    let more: Vec<&str> = lines.take_while(|l| l.starts_with(' ')).map(str::trim).collect();
    if !more.is_empty() {
        out.push_str(": ");
        out.push_str(&more.join(", "));
    }
    out
}

fn main() -> ExitCode {
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help and --version go to stdout with status 0.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // One line, not clap's multi-line usage block: scripts read stderr too.
            eprintln!("shipworm: {} (see 'shipworm --help')", one_line(&e.to_string()));
            return ExitCode::from(2);
        }
    };
    if matches!(cli.command, cli::Command::Address(_) | cli::Command::Status(_) | cli::Command::CheckConfig(_)) {
        // A command whose output goes to a pipe stops quietly when the reader leaves
        // (`| head`), as Unix tools do; the daemons keep ignoring SIGPIPE (sockets).
        // SAFETY: setting a signal's disposition to its default, before any thread.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    let result = match cli.command {
        cli::Command::Address(args) => cmd::address::run(&args),
        cli::Command::Server(args) => cmd::server::run(&args),
        cli::Command::Relay(args) => cmd::relay::run(&args),
        cli::Command::Client(args) => cmd::client::run(&args),
        cli::Command::Status(args) => cmd::status::run(&args),
        cli::Command::CheckConfig(args) => cmd::check_config::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("shipworm: {}", f.message);
            ExitCode::from(f.status)
        }
    }
}
